"""The verbs: each calls one or two documented operations and says what it did.

A verb returns a ``Result``: the API's answer (printed as is with ``--json``) and its text
for a person; ``note`` goes to stderr either way (what to set before importing, say)."""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cli.client import Client
from cli.render import cell, duration, fields, table, when


class UsageProblem(Exception):
    """The command line itself is wrong (a file that cannot be read, a bad duration)."""


@dataclass(frozen=True)
class Result:
    data: Any
    text: str
    note: str = ""


_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def milliseconds(text: str) -> int:
    """``90s``, ``5m``, ``1h30m``, ``1d`` or plain milliseconds, as the import reads them."""
    if text.isdigit():
        return int(text)
    match = _DURATION.match(text)
    if not text or not match:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration: give e.g. 90s, 5m, 1h30m, 1d or milliseconds."
        )
    d, h, m, s = (int(part or 0) for part in match.groups())
    return (((d * 24 + h) * 60 + m) * 60 + s) * 1000


def _endpoint_line(endpoint: dict[str, Any]) -> str:
    return f"endpoint {endpoint['id']} ({endpoint['name']})"


def _next(endpoint: dict[str, Any]) -> str:
    return f"next run {when(endpoint.get('next_run_at'))} ({cell(endpoint.get('next_run_source'))})"


# --- Reading ---------------------------------------------------------------------------


def endpoints_list(client: Client, args: argparse.Namespace) -> Result:
    query = {
        "job_id": args.job,
        "status": args.status,
        "search": args.search,
        "limit": args.limit,
        "cursor": args.cursor,
    }
    page = client.call("list_endpoints", query=query)
    text = table(
        page["items"],
        [
            ("ID", lambda e: e["id"]),
            ("JOB", lambda e: e["job_id"]),
            ("NAME", lambda e: e["name"]),
            ("NEXT RUN", lambda e: e["next_run_at"]),
            ("SOURCE", lambda e: e["next_run_source"]),
            ("FAILS", lambda e: e["failure_count"]),
            ("PAUSED UNTIL", lambda e: e["paused_until"]),
            ("URL", lambda e: e["url"]),
        ],
    )
    note = f"More: --cursor {page['next_cursor']}" if page.get("next_cursor") else ""
    return Result(page, text, note)


SHOWN = (
    "id",
    "job_id",
    "name",
    "url",
    "method",
    "baseline_cron",
    "timezone",
    "baseline_interval_ms",
    "min_interval_ms",
    "max_interval_ms",
    "ai_hint_interval_ms",
    "ai_hint_next_run_at",
    "ai_hint_expires_at",
    "paused_until",
    "pause_source",
    "pause_reason",
    "failure_count",
    "last_run_at",
    "next_run_at",
    "next_run_source",
    "archived_at",
)


def endpoints_show(client: Client, args: argparse.Namespace) -> Result:
    endpoint = client.call("get_endpoint", endpoint_id=args.id)
    text = fields(endpoint, SHOWN) + f"\n\n{endpoint.get('explanation', '')}"
    return Result(endpoint, text.rstrip())


def runs(client: Client, args: argparse.Namespace) -> Result:
    page = client.call(
        "list_endpoint_runs",
        endpoint_id=args.id,
        query={"status": args.status, "limit": args.limit, "cursor": args.cursor},
    )
    text = table(
        page["items"],
        [
            ("ID", lambda r: r["id"]),
            ("STARTED", lambda r: r["started_at"]),
            ("STATUS", lambda r: r["status"]),
            ("CODE", lambda r: r["status_code"]),
            ("TOOK", lambda r: duration(r["duration_ms"])),
            ("TRIGGER", lambda r: r["trigger"]),
            ("ATTEMPT", lambda r: r["attempt"]),
            ("ERROR", lambda r: r["error"]),
        ],
    )
    note = f"Older: --cursor {page['next_cursor']}" if page.get("next_cursor") else ""
    return Result(page, text, note)


def explain(client: Client, args: argparse.Namespace) -> Result:
    endpoint = client.call("get_endpoint", endpoint_id=args.id)
    head = f"{_endpoint_line(endpoint)}: {_next(endpoint)}"
    data = {key: endpoint.get(key) for key in ("id", "name", "next_run_at", "next_run_source")}
    data["explanation"] = endpoint.get("explanation", "")
    return Result(data, f"{head}\n{data['explanation']}")


def preview(client: Client, args: argparse.Namespace) -> Result:
    answer = client.call("preview_runs", endpoint_id=args.id, query={"count": args.count})
    text = table(
        answer["runs"],
        [
            ("UTC", lambda r: r["utc"]),
            (f"LOCAL ({answer['timezone']})", lambda r: r["local"]),
            ("SOURCE", lambda r: r["source"]),
        ],
    )
    return Result(answer, text)


# --- Changing ----------------------------------------------------------------------------


def pause(client: Client, args: argparse.Namespace) -> Result:
    body: dict[str, Any] = {"reason": args.reason}
    if args.until:
        body["until"] = args.until
    if args.for_ms is not None:
        body["for_ms"] = args.for_ms
    endpoint = client.call("pause_endpoint", endpoint_id=args.id, body=body)
    text = f"Paused {_endpoint_line(endpoint)} until {when(endpoint['paused_until'])}."
    return Result(endpoint, text)


def resume(client: Client, args: argparse.Namespace) -> Result:
    endpoint = client.call("resume_endpoint", endpoint_id=args.id)
    return Result(endpoint, f"Resumed {_endpoint_line(endpoint)}: {_next(endpoint)}.")


def hint(client: Client, args: argparse.Namespace) -> Result:
    if args.clear:
        endpoint = client.call("clear_hints", endpoint_id=args.id, body={"reason": args.reason})
        return Result(
            endpoint, f"Cleared the hints of {_endpoint_line(endpoint)}: {_next(endpoint)}."
        )
    body: dict[str, Any] = {"reason": args.reason}
    for name in ("interval_ms", "next_run_at", "next_run_in_ms", "ttl_ms"):
        if getattr(args, name) is not None:
            body[name] = getattr(args, name)
    endpoint = client.call("set_hint", endpoint_id=args.id, body=body)
    expires = when(endpoint["ai_hint_expires_at"])
    text = f"Hinted {_endpoint_line(endpoint)} until {expires}: {_next(endpoint)}."
    if endpoint.get("notice"):
        text += f"\n{endpoint['notice']}"
    return Result(endpoint, text)


def trigger(client: Client, args: argparse.Namespace) -> Result:
    endpoint = client.call("run_endpoint_now", endpoint_id=args.id)
    return Result(
        endpoint,
        f"{_endpoint_line(endpoint).capitalize()} runs now: the scheduler has it due at "
        f"{when(endpoint['next_run_at'])}.",
    )


def test(client: Client, args: argparse.Namespace) -> Result:
    run = client.call("test_endpoint", endpoint_id=args.id)
    code = f" HTTP {run['status_code']}" if run.get("status_code") is not None else ""
    text = f"Run {run['id']}: {run['status']}{code} in {duration(run.get('duration_ms'))}."
    if run.get("error"):
        text += f"\n{run['error']}"
    return Result(run, text)


# --- Backfills ----------------------------------------------------------------------------

UNDER_WAY = ("queued", "running")
SHOWN_SLOTS = 20  # a dry run's slots in words; --json lists them all
FOLLOW_EVERY_S = 2.0


def rate(text: str) -> float:
    """Runs a second: ``5``, ``5/s`` (as manage.py backfill takes it) or ``0.5``."""
    try:
        return float(text.removesuffix("/s"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a rate: give runs a second, e.g. 5 or 5/s."
        ) from None


def backfill(client: Client, args: argparse.Namespace) -> Result:
    """Start a backfill (or its dry run), or show or cancel one: the manage.py command's
    verbs, through the API."""
    if args.status is not None or args.cancel is not None:
        if args.cancel is not None:
            answer = client.call("cancel_backfill", backfill_id=args.cancel)
        else:
            answer = client.call("get_backfill", backfill_id=args.status)
        return _backfill_result(client, args, answer)
    if (args.id is None) == (args.job is None):
        raise UsageProblem("Name the ENDPOINT_ID to backfill, or --job JOB_ID.")
    if not args.start or not args.end:
        raise UsageProblem("Give the range: --from ISO --to ISO (e.g. 2026-03-01T02:00Z).")
    body = {
        "endpoint_id": args.id,
        "job_id": args.job,
        "range_from": args.start,
        "range_to": args.end,
        "rate": args.rate,
        "dry_run": args.dry_run,
    }
    answer = client.call("start_backfill", body={k: v for k, v in body.items() if v is not None})
    if args.dry_run:
        return Result(answer, _dry_run_words(answer))
    return _backfill_result(client, args, answer)


def _backfill_result(client: Client, args: argparse.Namespace, answer: Any) -> Result:
    last = ""
    while args.wait and answer["status"] in UNDER_WAY:
        line = _progress_words(answer)
        if line != last and not args.json:
            print(line, flush=True)
            last = line
        time.sleep(FOLLOW_EVERY_S)
        answer = client.call("get_backfill", backfill_id=answer["id"])
    text = _progress_words(answer)
    if answer["status"] in UNDER_WAY:
        text += (
            f"\nFollow it with: cronicorn backfill --status {answer['id']} --wait; "
            f"stop it with: cronicorn backfill --cancel {answer['id']}"
        )
    return Result(answer, text)


def _progress_words(b: dict[str, Any]) -> str:
    what = b["endpoint"] or f"job {b['job']}"
    return (
        f"Backfill {b['id']} of {what} ({b['status']}): {b['succeeded'] + b['failed']} of "
        f"{b['total']} run, {b['succeeded']} succeeded, {b['failed']} failed, "
        f"{b['started']} in flight, {b['pending']} to start, {b['skipped']} skipped; "
        f"at {b['rate']:g}/s."
    )


def _dry_run_words(plan: dict[str, Any]) -> str:
    slots = plan["slots"]
    lines = [
        f"Dry run: {len(slots)} slots from {when(plan['range_from'])} to "
        f"{when(plan['range_to'])}: {plan['total']} would run (about "
        f"{plan['total'] / plan['rate']:.0f} s at {plan['rate']:g}/s), {plan['skipped']} not. "
        "Nothing was written."
    ]
    for slot in slots[:SHOWN_SLOTS]:
        what = "run" if slot["runs"] else f"skip ({slot['note']})"
        lines.append(f"  {when(slot['scheduled_for'])}  endpoint {slot['endpoint_id']}  {what}")
    if len(slots) > SHOWN_SLOTS:
        lines.append(f"  … {len(slots) - SHOWN_SLOTS} more (--json lists them all)")
    return "\n".join(lines)


# --- Configuration as code -----------------------------------------------------------------

SYMBOLS = {"created": "+", "updated": "~", "unchanged": "=", "archived": "-"}
_REFERENCE = re.compile(r"\$\{(CRONICORN_SECRET_[A-Za-z0-9_]+)\}")


def export(client: Client, args: argparse.Namespace) -> Result:
    answer = client.call("export_config", query={"format": args.format, "job": args.job})
    note = ""
    if answer["secret_references"]:
        note = "Secret values were not exported; before importing, set: " + ", ".join(
            answer["secret_references"]
        )
    if args.output:
        try:
            Path(args.output).write_text(answer["text"], encoding="utf-8")
        except OSError as exc:
            raise UsageProblem(f"{args.output}: cannot be written ({exc}).") from None
        return Result(answer, f"Wrote {args.output}.", note)
    return Result(answer, answer["text"].rstrip("\n"), note)


def import_(client: Client, args: argparse.Namespace) -> Result:
    text = _read(args.file)
    fmt = args.format or ("json" if args.file.lower().endswith(".json") else "yaml")
    # The file's references, from this machine's environment: the server reads none of its own.
    names = sorted(set(_REFERENCE.findall(text)))
    secrets = {name: os.environ[name] for name in names if name in os.environ}
    body = {
        "text": text,
        "format": fmt,
        "dry_run": args.dry_run,
        "prune": args.prune,
        "secrets": secrets,
    }
    answer = client.call("import_config", body=body)
    lines = []
    for change in answer["changes"]:
        symbol = SYMBOLS.get(change["action"], "?")
        lines.append(f"{symbol} {change['kind']} {change['name']}: {change['action']}")
        lines += [f"    {f['name']}: {f['old']} -> {f['new']}" for f in change["fields"]]
    counts = answer["counts"]
    summary = ", ".join(f"{counts.get(a, 0)} {a}" for a in ("created", "updated", "archived"))
    summary += f", {counts.get('unchanged', 0)} unchanged."
    if args.dry_run:
        summary = f"Dry run: {summary} Nothing was written."
    else:
        summary = summary[0].upper() + summary[1:]
    note = "\n".join(f"warning: {w}" for w in answer["warnings"])
    return Result(answer, "\n".join([*lines, summary]), note)


def _read(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageProblem(f"{path}: no such file; give the path of a YAML or JSON file.") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageProblem(f"{path}: cannot be read ({exc}).") from None
