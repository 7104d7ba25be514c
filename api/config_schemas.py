"""The API's shapes of configuration as code: an export and an import of the YAML or JSON
file that ``manage.py export_endpoints``/``import_endpoints`` write and read
(``endpoints/config_io``)."""

from __future__ import annotations

from typing import Literal

from ninja import Field, Schema
from pydantic import ConfigDict

from api.schemas import Bool, Input

FORMAT = "yaml or json (yaml also reads JSON)."


class ConfigExport(Schema):
    format: str = Field(description=FORMAT)
    text: str = Field(description="The file, in the import's format; secrets as references.")
    secret_references: list[str] = Field(
        description="The ${CRONICORN_SECRET_...} variables the file names: give their values "
        "in the import's secrets."
    )


class ConfigImportIn(Input):
    """A configuration file to apply (or, with dry_run, to compare) for the caller's tenants."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "text": "version: 1\ntenants:\n  - name: Acme\n    jobs: []\n",
                    "dry_run": True,
                }
            ]
        },
    )

    text: str = Field(min_length=1, description="The file's text.")
    format: Literal["yaml", "json"] = Field("yaml", description=FORMAT)
    dry_run: Bool = Field(False, description="Say what would change; write nothing.")
    prune: Bool = Field(
        False,
        description="Archive the endpoints of the file's jobs that it no longer lists.",
    )
    secrets: dict[str, str] = Field(
        default_factory=dict,
        description="The values of the file's ${CRONICORN_SECRET_...} references, by name: "
        "the server's own environment is never read for an import through the API.",
    )


class FieldChangeOut(Schema):
    name: str
    old: str
    new: str


class ChangeOut(Schema):
    kind: str = Field(description="tenant, channel, job or endpoint.")
    name: str
    action: str = Field(description="created, updated, unchanged or archived.")
    fields: list[FieldChangeOut]


class ConfigImportOut(Schema):
    dry_run: bool
    counts: dict[str, int] = Field(description="Changes by action.")
    changes: list[ChangeOut]
    warnings: list[str]


Format = Literal["yaml", "json"]
