"""The OpenAPI document: valid, at a stable URL, every route in it one of the registered
operations (which the access and MCP tests call one by one), docs that work offline."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from openapi_spec_validator import validate

from api.operations import OPERATIONS

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_openapi_document_validates_and_lists_exactly_the_operations(
    http: httpx.Client,
) -> None:
    response = http.get("/openapi.json")
    assert response.status_code == 200
    document = response.json()
    validate(document)
    assert document["openapi"].startswith("3.")
    routes = {
        (method, path)
        for path, item in document["paths"].items()
        for method in item
        if method in ("get", "post", "patch", "put", "delete")
    }
    registered = {(op.method, "/api/v1" + op.path) for op in OPERATIONS}
    assert routes == registered
    ids = {item[m]["operationId"] for item in document["paths"].values() for m in item}
    assert ids == {op.name for op in OPERATIONS}
    assert document["components"]["securitySchemes"]


def test_every_operation_documents_its_problems_as_problem_json(http: httpx.Client) -> None:
    document = http.get("/openapi.json").json()
    for item in document["paths"].values():
        for method, operation in item.items():
            responses = operation["responses"]
            assert {"401", "422", "429"} <= set(responses)
            if method != "get":  # a preview saves nothing: no conflict, but CSRF applies
                saves = operation["operationId"] != "preview_change"
                assert {"403", "409"} <= set(responses) if saves else "403" in responses
            if "requestBody" in operation:
                assert "400" in responses
            for code, response in responses.items():
                if code.startswith(("4", "5")):
                    assert list(response["content"]) == ["application/problem+json"]
            assert operation["description"] and operation["summary"]


def test_the_docs_page_loads_its_scripts_from_this_server_not_a_cdn(
    http: httpx.Client,
) -> None:
    page = http.get("/docs")
    assert page.status_code == 200
    assert "swagger-ui-bundle.js" in page.text
    assert "cdn" not in page.text.lower() and "https://" not in page.text


def test_the_schema_and_docs_need_a_key_or_a_session_too(live_server: Any) -> None:
    for path in ("/api/v1/openapi.json", "/api/v1/docs"):
        response = httpx.get(live_server.url + path)
        assert response.status_code == 401
        assert response.headers["Content-Type"] == "application/problem+json"
