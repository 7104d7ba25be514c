"""``manage.py audit``: who changed what, newest first."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from endpoints.audit import AuditEntry, parse_object
from endpoints.management.commands._shared import iso, to_json

MAX_LIMIT = 10_000


class Command(BaseCommand):
    help = (
        "Show the audit trail, newest first: every change through the admin, the API, MCP, "
        "an import, a command, the planner or the breaker, with its actor, the object, each "
        "field before -> after (secrets masked) and when."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--object",
            metavar="TYPE:ID",
            help="Only this object's entries: endpoint:12, job:3 or tenant:1.",
        )
        parser.add_argument(
            "--limit", type=int, default=50, metavar="N", help="At most N entries (default 50)."
        )
        parser.add_argument("--json", action="store_true", help="JSON, for scripts.")

    def handle(self, *args: Any, **options: Any) -> None:
        limit = options["limit"]
        if not 1 <= limit <= MAX_LIMIT:
            raise CommandError(f"--limit takes 1..{MAX_LIMIT}; got {limit}.")
        entries = AuditEntry.objects.order_by("-at", "-pk")
        if options["object"]:
            try:
                kind, pk = parse_object(options["object"])
            except ValueError as exc:
                raise CommandError(f"--object {exc}") from None
            entries = entries.filter(object_type=kind, object_id=pk)
        found = list(entries[:limit])
        if options["json"]:
            self.stdout.write(to_json([as_json(entry) for entry in found]))
            return
        if not found:
            self.stdout.write("No changes recorded.")
        for entry in found:
            self.stdout.write(as_text(entry))


def as_json(entry: AuditEntry) -> dict[str, Any]:
    return {
        "id": entry.pk,
        "at": iso(entry.at),
        "actor_kind": entry.actor_kind,
        "actor": entry.actor,
        "object": f"{entry.object_type}:{entry.object_id}",
        "object_name": entry.object_name,
        "action": entry.action,
        "changes": entry.changes,
        "reason": entry.reason,
    }


def as_text(entry: AuditEntry) -> str:
    line = (
        f"{entry.at:%Y-%m-%d %H:%M:%S} UTC  {entry.actor}  {entry.action} "
        f"{entry.object_type} {entry.object_name} (id {entry.object_id})"
    )
    if entry.change_words:
        line += f": {entry.change_words}"
    if entry.reason:
        line += f" — {entry.reason}"
    return line
