"""``manage.py export_endpoints``: write tenants, jobs and endpoints as YAML or JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from endpoints.config_io.documents import dump_document
from endpoints.config_io.exporting import export_config
from endpoints.management.commands._progress import progress_bars


class Command(BaseCommand):
    help = (
        "Write tenants, jobs and their live endpoints in the format import_endpoints reads, "
        "so exporting and importing again changes nothing. Secret values are never written: "
        "secret headers (listed in secret_headers in any letter case, or named like "
        "credentials), URL passwords and HMAC secrets become ${CRONICORN_SECRET_...} "
        "references; the variables to set before importing are listed on stderr."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--format", choices=("yaml", "json"), default="yaml", help="Default: yaml."
        )
        parser.add_argument(
            "--tenant",
            action="append",
            default=[],
            metavar="NAME",
            help="Only this tenant (repeat for several; default: all).",
        )
        parser.add_argument(
            "--job",
            action="append",
            default=[],
            metavar="NAME",
            help="Only jobs with this name (repeat for several; default: all).",
        )
        parser.add_argument(
            "--output", "-o", metavar="FILE", help="Write to FILE instead of stdout."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        with progress_bars() as progress:
            document, references = export_config(
                tenant_names=options["tenant"], job_names=options["job"], progress=progress
            )
        if (options["tenant"] or options["job"]) and not document["tenants"]:
            raise CommandError(
                "Nothing matches --tenant/--job; check the names with manage.py endpoints."
            )
        text = dump_document(document, fmt=options["format"])
        if options["output"]:
            try:
                Path(options["output"]).write_text(text, encoding="utf-8")
            except OSError as exc:
                raise CommandError(f"{options['output']}: cannot be written ({exc}).") from None
        else:
            self.stdout.write(text, ending="")
        if references:
            self.stderr.write(
                "Secret values were not exported; before importing, set: "
                + ", ".join(sorted(set(references)))
            )
