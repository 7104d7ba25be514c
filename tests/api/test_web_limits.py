"""The web server's own limits (settings.CRONICORN_WEB_*, which
cronicorn_site/gunicorn.conf.py reads) as a client meets them: every read's query, each
parameter at its documented maximum in the costliest characters, fits the request line;
past a limit gunicorn answers the problem the OpenAPI document lists (414, 431, 413),
never its HTML page."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from django.conf import settings

from api.main import api
from tests.api.serving import gunicorn_serving
from tests.world import ApiWorld

# Four UTF-8 bytes, each percent-encoded: the most a character costs in a query, 12 bytes.
COSTLIEST = "\U0001d11e"
# The longest date-time the document's format describes: microseconds and an offset.
LONGEST_TIME = "2026-03-01T12:00:00.000000+00:00"


def document() -> dict[str, Any]:
    return api.get_openapi_schema(path_prefix="/api/v1/")  # type: ignore[no-any-return]


def longest_value(name: str, schema: dict[str, Any]) -> str:
    """The longest value ``schema`` allows, as a string; a parameter the document does
    not bound cannot be sized, and fails here."""
    branches = [b for b in schema.get("anyOf", [schema]) if b.get("type") != "null"]
    values = []
    for branch in branches:
        if "enum" in branch:
            values.append(max(branch["enum"], key=len))
        elif branch.get("type") == "integer":
            assert "maximum" in branch, f"{name}: document its maximum"
            values.append(str(branch["maximum"]))
        elif branch.get("format") == "date-time":
            values.append(LONGEST_TIME)
        else:
            assert "maxLength" in branch, f"{name}: document its maxLength"
            values.append(COSTLIEST * branch["maxLength"])
    return max(values, key=lambda v: len(quote(v, safe="")))


def longest_request_line(path: str, operation: dict[str, Any]) -> str:
    query = []
    for parameter in operation.get("parameters", []):
        value = quote(longest_value(parameter["name"], parameter["schema"]), safe="")
        if parameter["in"] == "path":
            path = path.replace("{" + parameter["name"] + "}", value)
        elif parameter["in"] == "query":
            query.append(f"{parameter['name']}={value}")
    return f"GET {path}?{'&'.join(query)} HTTP/1.1"


def test_every_reads_query_at_its_documented_maximum_fits_the_request_line() -> None:
    limit = settings.CRONICORN_WEB_MAX_REQUEST_LINE
    for path, item in document()["paths"].items():
        if "get" in item:
            line = longest_request_line(path, item["get"])
            assert len(line.encode()) <= limit, f"GET {path}: {len(line.encode())} > {limit}"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_search_and_a_cursor_of_the_longest_reach_the_api_through_gunicorn(
    api_world: ApiWorld, tmp_path: Path
) -> None:
    line = longest_request_line(
        "/api/v1/endpoints", document()["paths"]["/api/v1/endpoints"]["get"]
    )
    url = line.removeprefix("GET ").removesuffix(" HTTP/1.1")
    assert "search=" in url and "cursor=" in url
    headers = {"Authorization": f"Bearer {api_world.write_key}"}
    with gunicorn_serving(tmp_path) as base_url:
        answer = httpx.get(base_url + url, headers=headers)
    # The API's own answer (no such job), not the web server's 414.
    assert answer.status_code == 404, answer.text[:300]
    assert answer.headers["Content-Type"] == "application/problem+json"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_past_each_limit_gunicorn_answers_the_problem_the_document_lists(
    api_world: ApiWorld, tmp_path: Path
) -> None:
    auth = {"Authorization": f"Bearer {api_world.write_key}"}
    jobs = document()["paths"]["/api/v1/jobs"]
    over_line = "x" * settings.CRONICORN_WEB_MAX_REQUEST_LINE
    long_header = {"X-Long": "x" * settings.CRONICORN_WEB_MAX_HEADER_BYTES}
    many_headers = {f"X-H{i}": "1" for i in range(settings.CRONICORN_WEB_MAX_HEADERS + 1)}
    with gunicorn_serving(tmp_path) as base_url:
        answers = {
            ("get", 414): httpx.get(f"{base_url}/api/v1/jobs?search={over_line}", headers=auth),
            ("get", 431): httpx.get(f"{base_url}/api/v1/jobs", headers={**auth, **long_header}),
            ("post", 431): httpx.post(f"{base_url}/api/v1/jobs", headers={**auth, **many_headers}),
            ("post", 413): httpx.post(
                f"{base_url}/api/v1/jobs",
                headers=auth,
                json={"name": "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)},
            ),
        }
    for (method, status), answer in answers.items():
        assert answer.status_code == status, (status, answer.text[:300])
        assert answer.headers["Content-Type"] == "application/problem+json", answer.text[:300]
        problem = answer.json()
        assert problem["status"] == status and problem["type"] == "about:blank"
        assert "; " in problem["detail"], problem  # what is wrong; what to do
        assert str(status) in jobs[method]["responses"], (method, status)
