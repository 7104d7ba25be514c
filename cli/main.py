"""``cronicorn``: parse the command line, call the verb, print, exit with a code scripts
can test.

Exit codes: 0 done; 1 the server refused (an HTTP 4xx or 5xx answer, said in words from
its problem details); 2 a usage error (arguments, config, a file that cannot be read);
3 the server could not be reached (wrong URL, down, no answer in time).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from cli import verbs
from cli.client import Client, Refused, Unreachable
from cli.config import ConfigProblem, load_settings
from cli.render import as_json, problem

OK, REFUSED, USAGE, UNREACHABLE = 0, 1, 2, 3
EPILOG = (
    "Server and key: CRONICORN_URL and CRONICORN_API_KEY, or a profile of "
    "~/.config/cronicorn/config.toml (--profile). Exit codes: 0 done, 1 refused by the "
    "server (4xx/5xx), 2 usage error, 3 server unreachable."
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cronicorn",
        description="Operate a Cronicorn server through its REST API (no database needed).",
        epilog=EPILOG,
    )
    _common(parser, None)
    commands = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    common = argparse.ArgumentParser(add_help=False)
    _common(common, argparse.SUPPRESS)

    def verb(name: str, func: Callable[..., Any], help: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, parents=[common], help=help, description=help)
        sub.set_defaults(func=func)
        return sub

    def endpoint_id(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("id", type=int, metavar="ENDPOINT_ID", help="The endpoint's id.")

    listing = commands.add_parser("endpoints", help="List endpoints or show one.")
    which = listing.add_subparsers(dest="what", metavar="list|show", required=True)
    lister = which.add_parser("list", parents=[common], help="List endpoints, oldest first.")
    lister.set_defaults(func=verbs.endpoints_list)
    lister.add_argument("--job", type=int, metavar="JOB_ID", help="Only this job's.")
    lister.add_argument(
        "--status", help="active, paused, failing, hinted, archived, ... (the API's filter)."
    )
    lister.add_argument("--search", metavar="WORD", help="A word of the name or URL.")
    _paging(lister)
    shower = which.add_parser("show", parents=[common], help="Show one endpoint.")
    shower.set_defaults(func=verbs.endpoints_show)
    endpoint_id(shower)

    sub = verb("runs", verbs.runs, "An endpoint's runs, newest first.")
    endpoint_id(sub)
    sub.add_argument("--status", help="success, failure, timeout, running, ... (one status).")
    _paging(sub)

    endpoint_id(verb("explain", verbs.explain, "Why the endpoint runs when it does next."))

    sub = verb("preview", verbs.preview, "The next run times, in UTC and the endpoint's zone.")
    endpoint_id(sub)
    sub.add_argument("--count", type=int, default=10, help="How many (1-100; default 10).")

    sub = verb("pause", verbs.pause, "Pause an endpoint for a while or until a time.")
    endpoint_id(sub)
    until = sub.add_mutually_exclusive_group(required=True)
    _duration(until, "--for", "for_ms", "For how long: 90s, 5m, 1h30m, 1d or milliseconds.")
    until.add_argument("--until", metavar="TIME", help="Until an ISO 8601 time with an offset.")
    sub.add_argument("--reason", default="", help="Why; shown with the pause.")

    endpoint_id(verb("resume", verbs.resume, "Resume a paused endpoint; it is planned afresh."))

    sub = verb("hint", verbs.hint, "Run an endpoint at another cadence, or once, for a while.")
    endpoint_id(sub)
    kind = sub.add_mutually_exclusive_group(required=True)
    _duration(
        kind, "--interval", "interval_ms", "A new cadence (within the endpoint's min/max interval)."
    )
    kind.add_argument("--at", dest="next_run_at", metavar="TIME", help="One run at this time.")
    _duration(kind, "--in", "next_run_in_ms", "One run after this delay.")
    kind.add_argument("--clear", action="store_true", help="Drop the endpoint's hints.")
    _duration(
        sub,
        "--ttl",
        "ttl_ms",
        "How long the hint lasts (default: 1h for an interval, 30m for one run).",
    )
    sub.add_argument("--reason", default="", help="Why; kept in the hint history.")

    endpoint_id(verb("trigger", verbs.trigger, "Run now: due at once; the scheduler runs it."))
    endpoint_id(verb("test", verbs.test, "Call the endpoint once now and show the run."))

    sub = verb("import", verbs.import_, "Apply a configuration file (all or nothing).")
    sub.add_argument("file", metavar="FILE", help="A YAML or JSON file, or - for stdin.")
    sub.add_argument("--format", choices=("yaml", "json"), help="Default: from the name.")
    sub.add_argument("--dry-run", action="store_true", help="Say what would change only.")
    sub.add_argument(
        "--prune", action="store_true", help="Archive the file's jobs' unlisted endpoints."
    )

    sub = verb("export", verbs.export, "Write your tenant's configuration as a file.")
    sub.add_argument("--format", choices=("yaml", "json"), default="yaml")
    sub.add_argument("--job", metavar="NAME", help="Only this job.")
    sub.add_argument("--output", "-o", metavar="FILE", help="Write to FILE, not stdout.")

    sub = verb(
        "backfill",
        verbs.backfill,
        "Run a past range's slots once each (paced, by the running scheduler); or show "
        "(--status) or stop (--cancel) a backfill.",
    )
    sub.add_argument("id", type=int, nargs="?", metavar="ENDPOINT_ID", help="The endpoint.")
    sub.add_argument("--job", type=int, metavar="JOB_ID", help="Or every endpoint of a job.")
    sub.add_argument("--from", dest="start", metavar="ISO", help="The range's start.")
    sub.add_argument("--to", dest="end", metavar="ISO", help="Its end (excluded), not after now.")
    sub.add_argument("--rate", type=verbs.rate, help="Runs a second (the server's default: 5).")
    sub.add_argument("--dry-run", action="store_true", help="List the slots; run none.")
    sub.add_argument("--wait", action="store_true", help="Show progress until it ends.")
    one = sub.add_mutually_exclusive_group()
    one.add_argument("--status", type=int, metavar="ID", help="A backfill's progress.")
    one.add_argument("--cancel", type=int, metavar="ID", help="Stop a backfill.")

    mcp = commands.add_parser(
        "mcp", parents=[common], help="An MCP server on stdio whose tools call this API."
    )
    mcp.set_defaults(func=None)
    return parser


def _common(parser: argparse.ArgumentParser, default: Any) -> None:
    parser.add_argument(
        "--json",
        action="store_true",
        default=default or False,
        help="Print the API's answer as JSON (problems too, on stdout, with the exit code).",
    )
    parser.add_argument("--profile", default=default, help="A profile of the config file.")
    parser.add_argument("--url", default=default, help="The server's URL (over CRONICORN_URL).")


def _duration(parser: Any, flag: str, dest: str, help: str) -> None:
    parser.add_argument(flag, dest=dest, type=verbs.milliseconds, metavar="DURATION", help=help)


def _paging(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--limit", type=int, help="At most this many (the API's default: 50).")
    sub.add_argument("--cursor", help="The next page (printed after a full page).")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = load_settings(os.environ, profile=args.profile, url=args.url)
    except ConfigProblem as exc:
        print(f"cronicorn: {exc}", file=sys.stderr)
        return USAGE
    for warning in settings.warnings:
        print(f"cronicorn: warning: {warning}", file=sys.stderr)
    client = Client(settings.url, settings.key, settings.timeout)
    if args.verb == "mcp":
        from cli.mcp_proxy import serve  # the MCP SDK only for this verb

        return serve(client)
    return run(client, args)


def run(client: Client, args: argparse.Namespace) -> int:
    try:
        result = args.func(client, args)
    except verbs.UsageProblem as exc:
        print(f"cronicorn: {exc}", file=sys.stderr)
        return USAGE
    except Refused as exc:
        if args.json:
            print(as_json(exc.problem))
        print(f"cronicorn: {problem(exc.status, exc.problem, exc.retry_after)}", file=sys.stderr)
        return REFUSED
    except Unreachable as exc:
        print(f"cronicorn: cannot reach the server: {exc}", file=sys.stderr)
        return UNREACHABLE
    print(as_json(result.data) if args.json else result.text)
    if result.note:
        print(result.note, file=sys.stderr)
    return OK


if __name__ == "__main__":
    sys.exit(main())
