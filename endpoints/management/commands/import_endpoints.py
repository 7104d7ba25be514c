"""``manage.py import_endpoints FILE``: apply a YAML or JSON configuration file."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from endpoints.audit import Actor
from endpoints.config_io.documents import ConfigError
from endpoints.config_io.importing import Change, ImportPlan, import_config
from endpoints.management.commands._progress import progress_bars
from endpoints.management.commands._shared import to_json

SYMBOLS = {"created": "+", "updated": "~", "unchanged": "=", "archived": "-"}


class Command(BaseCommand):
    help = (
        "Create or update tenants, jobs and endpoints from a YAML or JSON file (the format "
        "export_endpoints writes; see endpoints/config_io/). Entries are matched by tenant, "
        "job and endpoint name; a job's or endpoint's omitted keys take their defaults, while "
        "runtime state (next run, hints, pauses, failures) is kept. All or nothing: any "
        "invalid entry means nothing is written and every problem is listed with its "
        "location. ${CRONICORN_SECRET_NAME} in a header value, the URL or hmac_secret is "
        "read from that environment variable (no other variable is ever read); exported "
        "files name secrets that way, so set those variables before importing."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", metavar="FILE", help="The file to read, or - for stdin.")
        parser.add_argument(
            "--format",
            choices=("yaml", "json"),
            help="How to parse FILE (default: json for *.json, else yaml; yaml also reads JSON).",
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Show what would be created, updated (field by field) or left unchanged, "
            "and write nothing.",
        )
        parser.add_argument(
            "--prune",
            action="store_true",
            help="Archive the endpoints of the jobs in the file that the file no longer "
            "lists (their run history is kept).",
        )
        parser.add_argument(
            "--json",
            action="store_true",
            help="The changes (each field's old and new value), counts and warnings as "
            "JSON, for scripts; problems still go to stderr with a non-zero exit.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        path = options["file"]
        text = read_text(path)
        fmt = options["format"] or ("json" if path.lower().endswith(".json") else "yaml")
        try:
            with progress_bars() as progress:
                plan = import_config(
                    text,
                    fmt=fmt,
                    environ=os.environ,
                    now=timezone.now(),
                    prune=options["prune"],
                    dry_run=options["dry_run"],
                    progress=progress,
                    actor=Actor.command(),
                )
        except ConfigError as exc:
            count = len(exc.problems)
            listing = "\n".join(f"  {problem}" for problem in exc.problems)
            noun = "problem" if count == 1 else "problems"
            raise CommandError(
                f"{path}: {count} {noun}, so nothing was written; fix and import again:\n{listing}"
            ) from None
        if options["json"]:
            self.stdout.write(to_json(as_json(plan, dry_run=options["dry_run"])))
            return
        for warning in plan.warnings:
            self.stderr.write(f"warning: {warning}")
        if options["verbosity"] >= 1:
            for change in plan.changes:
                self.stdout.write(render_change(change))
        self.stdout.write(summary(plan, dry_run=options["dry_run"]))


def read_text(path: str) -> str:
    """The file's text, read no further than one byte past the size cap (the import
    refuses it then): a huge file is never held in memory whole."""
    limit = settings.CRONICORN_MAX_CONFIG_BYTES + 1
    if path == "-":
        return sys.stdin.read(limit)
    try:
        with Path(path).open("rb") as file:
            return file.read(limit).decode("utf-8")
    except FileNotFoundError:
        raise CommandError(f"{path}: no such file; give the path of a YAML or JSON file.") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CommandError(f"{path}: cannot be read ({exc}).") from None


def render_change(change: Change) -> str:
    head = f"{SYMBOLS[change.action]} {change.kind} {change.label}: {change.action}"
    lines = [head] + [f"    {f.name}: {f.old} -> {f.new}" for f in change.fields]
    return "\n".join(lines)


def as_json(plan: ImportPlan, *, dry_run: bool) -> dict[str, Any]:
    actions = ("created", "updated", "archived", "unchanged")
    return {
        "dry_run": dry_run,
        "counts": {action: plan.count(action) for action in actions},
        "changes": [
            {
                "kind": change.kind,
                "name": change.label,
                "action": change.action,
                "fields": [{"name": f.name, "old": f.old, "new": f.new} for f in change.fields],
            }
            for change in plan.changes
        ],
        "warnings": plan.warnings,
    }


def summary(plan: ImportPlan, *, dry_run: bool) -> str:
    counts = ", ".join(
        f"{plan.count(action)} {action}" for action in ("created", "updated", "archived")
    )
    text = f"{counts}, {plan.count('unchanged')} unchanged."
    if dry_run:
        verdict = "would change" if plan.has_changes else "nothing to change"
        return f"Dry run ({verdict}): {text} Nothing was written."
    return text[0].upper() + text[1:]
