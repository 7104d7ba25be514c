"""Values that used to break an endpoint for good: every duration and interval is at
most a year in the one validation path, whatever the interface (REST, CLI, import,
model), the governor plans a value beyond it without raising, and forged cursors and
huge searches are 400 problems, never a 500 page."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import IntegrityError, transaction
from django.test import Client

from endpoints.governor import MAX_PLANNABLE_MS, EndpointSchedule, decide, explain_plan
from endpoints.models import Endpoint
from tests.world import ApiWorld

A_YEAR = MAX_PLANNABLE_MS
NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


@pytest.fixture
def api(api_world: ApiWorld) -> Client:
    return Client(headers={"Authorization": f"Bearer {api_world.write_key}"})


def post(api: Client, url: str, body: Any) -> Any:
    return api.post(url, json.dumps(body), content_type="application/json")


def assert_problem(response: Any, status: int, field: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/problem+json"
    problem: dict[str, Any] = response.json()
    if field:
        assert field in problem["errors"], problem
    return problem


def still_plans(api: Client, endpoint: Endpoint) -> None:
    response = api.get(f"/api/v1/endpoints/{endpoint.pk}")
    assert response.status_code == 200, response.content
    assert "Next run" in response.json()["explanation"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"for_ms": 10**17}, "for_ms"),
        ({"for_ms": 26 * 10**13}, "for_ms"),
        ({"for_ms": A_YEAR + 1}, "for_ms"),
        ({"for_ms": -5}, "for_ms"),
        ({"for_ms": 0}, "for_ms"),
    ],
)
def test_a_pause_beyond_a_year_or_not_positive_is_a_422_naming_the_field(
    api: Client, api_world: ApiWorld, body: dict[str, Any], field: str
) -> None:
    endpoint = api_world.a.endpoint
    assert_problem(post(api, f"/api/v1/endpoints/{endpoint.pk}/pause", body), 422, field)
    endpoint.refresh_from_db()
    assert endpoint.paused_until is None
    still_plans(api, endpoint)


def test_a_pause_until_a_time_beyond_a_year_is_refused(api: Client, api_world: ApiWorld) -> None:
    endpoint = api_world.a.endpoint
    response = post(
        api, f"/api/v1/endpoints/{endpoint.pk}/pause", {"until": "9999-12-31T00:00:00Z"}
    )
    assert "at most a year" in assert_problem(response, 409)["detail"]
    assert (
        post(api, f"/api/v1/endpoints/{endpoint.pk}/pause", {"for_ms": A_YEAR}).status_code == 200
    )


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"interval_ms": 60_000, "ttl_ms": 10**17}, 422),
        ({"interval_ms": 60_000, "ttl_ms": 26 * 10**13}, 422),
        ({"interval_ms": 60_000, "ttl_ms": -1}, 422),
        ({"interval_ms": 60_000, "ttl_ms": 31 * 365 * 86_400_000}, 422),
        # The schema bounds the interval too (the OpenAPI document says so), so the request
        # is refused as input before the operation sees it.
        ({"interval_ms": 2**62, "ttl_ms": 60_000}, 422),
        ({"interval_ms": A_YEAR + 1, "ttl_ms": 60_000}, 422),
        ({"next_run_at": "9000-01-01T00:00:00Z", "ttl_ms": 60_000}, 409),
    ],
)
def test_a_hint_beyond_a_year_is_refused_and_nothing_is_stored(
    api: Client, api_world: ApiWorld, body: dict[str, Any], status: int
) -> None:
    endpoint = api_world.a.endpoint
    assert_problem(post(api, f"/api/v1/endpoints/{endpoint.pk}/hint", body), status)
    endpoint.refresh_from_db()
    assert endpoint.ai_hint_interval_ms is None
    assert endpoint.ai_hint_expires_at is None
    still_plans(api, endpoint)


@pytest.mark.parametrize("field", ["baseline_interval_ms", "max_interval_ms", "min_interval_ms"])
@pytest.mark.parametrize("value", [2**63 - 1, A_YEAR + 1, 10**30])
def test_a_patch_of_an_interval_beyond_a_year_is_a_422_and_the_endpoint_still_plans(
    api: Client, api_world: ApiWorld, field: str, value: int
) -> None:
    endpoint = api_world.a.endpoint
    before = Endpoint.objects.values(field).get(pk=endpoint.pk)
    response = api.patch(
        f"/api/v1/endpoints/{endpoint.pk}",
        json.dumps({field: value}),
        content_type="application/json",
    )
    assert_problem(response, 422, field)
    assert Endpoint.objects.values(field).get(pk=endpoint.pk) == before
    still_plans(api, endpoint)


def test_a_year_exactly_is_accepted(api: Client, api_world: ApiWorld) -> None:
    endpoint = api_world.a.endpoint
    response = api.patch(
        f"/api/v1/endpoints/{endpoint.pk}",
        json.dumps({"baseline_interval_ms": A_YEAR, "max_interval_ms": A_YEAR}),
        content_type="application/json",
    )
    assert response.status_code == 200, response.content
    still_plans(api, endpoint)


def test_the_database_refuses_an_interval_beyond_a_year_from_any_writer(
    api_world: ApiWorld,
) -> None:
    for field in ("baseline_interval_ms", "max_interval_ms", "ai_hint_interval_ms"):
        with pytest.raises(IntegrityError), transaction.atomic():
            values: dict[str, Any] = {field: A_YEAR + 1}
            if field == "ai_hint_interval_ms":
                values["ai_hint_expires_at"] = datetime.now(UTC)
            Endpoint.objects.filter(pk=api_world.a.endpoint.pk).update(**values)


def test_the_model_validation_names_the_field(api_world: ApiWorld) -> None:
    endpoint = api_world.a.endpoint
    endpoint.ai_hint_interval_ms = A_YEAR * 2
    endpoint.ai_hint_expires_at = datetime.now(UTC)
    with pytest.raises(ValidationError) as refused:
        endpoint.full_clean()
    assert "ai_hint_interval_ms" in refused.value.message_dict


@pytest.mark.parametrize(
    "values",
    [
        {"baseline_interval_ms": 2**63 - 1},
        {"baseline_interval_ms": 60_000, "max_interval_ms": 2**63 - 1},
        {"baseline_interval_ms": 60_000, "min_interval_ms": 2**62},
        {
            "baseline_interval_ms": 60_000,
            "ai_hint_interval_ms": 2**62,
            "ai_hint_expires_at": NOW + timedelta(hours=1),
        },
        {"baseline_interval_ms": 2**40, "failure_count": 10**6},
        {"baseline_interval_ms": 60_000, "tenant_min_interval_ms": 2**62},
    ],
)
def test_the_governor_plans_a_stored_value_beyond_the_bound_and_reports_it(
    values: dict[str, Any],
) -> None:
    schedule = EndpointSchedule(**values)
    decision = decide(NOW, schedule)
    assert NOW <= decision.plan.next_run_at <= NOW + timedelta(milliseconds=A_YEAR * 2**5)
    text = explain_plan(NOW, schedule)
    if any(abs(v) > A_YEAR for k, v in values.items() if k.endswith("_ms")):
        assert "beyond the longest allowed" in text


def cursor(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "forged",
    [
        cursor("[Infinity, 1]"),
        cursor("[1, Infinity]"),
        cursor("[NaN, 1]"),
        cursor("[" * 3000 + "]" * 3000),
        cursor("[1e400, 1]"),
        cursor(f"[{2**80}, 1]"),
        cursor('["2026-01-01T00:00:00", 1]'),
        cursor('["9999-12-31T23:59:59+00:00", 99999999999999999999]'),
        cursor("[true, false]"),
        "A" * 5000,
        "!!!",
    ],
)
def test_a_forged_cursor_is_a_400_problem(api: Client, api_world: ApiWorld, forged: str) -> None:
    for url in (
        "/api/v1/endpoints",
        "/api/v1/jobs",
        f"/api/v1/endpoints/{api_world.a.endpoint.pk}/runs",
    ):
        assert_problem(api.get(url, {"cursor": forged}), 400)


def test_a_huge_search_is_a_400_problem(api: Client) -> None:
    assert_problem(api.get("/api/v1/endpoints", {"search": "x" * 60_000}), 400)
    assert api.get("/api/v1/endpoints", {"search": "alpha"}).status_code == 200


def test_an_unexpected_error_is_a_problem_too(
    api: Client, api_world: ApiWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    import api.routers.endpoints as routes

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(routes, "explain_plan", broken)
    client = Client(
        headers={"Authorization": f"Bearer {api_world.write_key}"}, raise_request_exception=False
    )
    problem = assert_problem(client.get(f"/api/v1/endpoints/{api_world.a.endpoint.pk}"), 500)
    assert "a bug" not in json.dumps(problem)


def test_hint_on_the_command_line_with_an_empty_interval_is_a_clean_error(
    api_world: ApiWorld,
) -> None:
    ref = api_world.a.endpoint.ref
    for args in (["--interval", ""], ["--interval", "30s", "--ttl", ""], ["--interval", "99999d"]):
        with pytest.raises(CommandError) as refused:
            call_command("hint", ref, *args, stdout=StringIO())
        assert "--interval" in str(refused.value) or "--ttl" in str(refused.value)


def test_create_api_key_with_an_expiry_beyond_a_year_is_a_clean_error(
    api_world: ApiWorld,
) -> None:
    with pytest.raises(CommandError, match="--expires"):
        call_command(
            "create_api_key",
            "--tenant",
            api_world.a.tenant.name,
            "--expires",
            "99999999999d",
            stdout=StringIO(),
        )


@pytest.mark.parametrize("key", ["run_once_at", "active_from", "active_until"])
@pytest.mark.parametrize("moment", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"])
def test_a_policy_time_whose_instant_datetime_cannot_hold_is_a_422_not_a_500(
    api: Client, api_world: ApiWorld, key: str, moment: str
) -> None:
    endpoint = api_world.a.endpoint
    for url in (f"/api/v1/endpoints/{endpoint.pk}", f"/api/v1/jobs/{endpoint.job_id}"):
        response = api.patch(
            url, json.dumps({"run_policy": {key: moment}}), content_type="application/json"
        )
        problem = assert_problem(response, 422, "run_policy")
        assert f"{key}: '{moment}' is not between the years 2000 and 9000" in str(problem), problem
    endpoint.refresh_from_db()
    assert endpoint.run_policy == {}
    still_plans(api, endpoint)
