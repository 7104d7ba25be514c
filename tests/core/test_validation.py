"""The one validation path (endpoints/validation.py): random and hostile values in every
endpoint field, through ``full_clean`` and through import, give a ValidationError or a
located import problem, never another exception; what passes, PostgreSQL stores; a
refused file changes nothing."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from endpoints.config_io.documents import ConfigError
from endpoints.config_io.importing import import_config, import_document
from endpoints.models import Endpoint, Job, Tenant
from tests.world import endpoint_form

pytestmark = pytest.mark.django_db

USER_FIELDS = (
    "name",
    "description",
    "url",
    "method",
    "headers",
    "secret_header_names",
    "body",
    "timeout_ms",
    "max_response_size_kb",
    "baseline_cron",
    "timezone",
    "baseline_interval_ms",
    "min_interval_ms",
    "max_interval_ms",
)
FILE_KEYS = (
    "name",
    "description",
    "url",
    "method",
    "headers",
    "secret_headers",
    "body",
    "timeout",
    "max_response_size_kb",
    "baseline_cron",
    "timezone",
    "baseline_interval",
    "min_interval",
    "max_interval",
)


class Deep(list[Any]):
    """A list nested ``depth`` levels deep, with a short repr (hypothesis prints it)."""

    def __init__(self, depth: int) -> None:
        value: Any = "bottom"
        for level in range(depth - 1):
            value = [value] if level % 2 else {"k": value}
        super().__init__([value])
        self.depth = depth

    def __repr__(self) -> str:
        return f"Deep({self.depth})"


def deep(depth: int) -> Any:
    return Deep(depth)


HOSTILE_TEXT = [
    "abc",
    "",
    " ",
    "-1",
    "1e309",
    "99999999999999999999999",
    "a\r\nX-Injected: 1",
    "\x00",
    "nul\x00inside",
    "tab\there",
    "ops/health",
    "${DJANGO_SECRET_KEY}",
    "http://a\x00b/",
    "http://xn--/",
    "http://xn--a.xn--b/",
    "http://[::1/",
    "http://h:99999/",
    "* * * * * *",
    "@reboot",
    "Europe/../../etc/passwd",
    "localtime",
    "x" * 20_000,
    "\ud800",
]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=40),
    st.sampled_from(HOSTILE_TEXT),
    st.binary(max_size=10),
)
json_like = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(
            st.one_of(st.text(max_size=8), st.sampled_from(HOSTILE_TEXT)), children, max_size=4
        ),
    ),
    max_leaves=12,
)
hostile = st.one_of(
    json_like,
    st.sampled_from([deep(40), deep(10_000), float("nan"), float("inf"), {"a": float("nan")}]),
    st.builds(set),
    st.dictionaries(st.sampled_from(HOSTILE_TEXT), st.sampled_from(HOSTILE_TEXT), max_size=3),
    st.lists(st.sampled_from(HOSTILE_TEXT), max_size=3),
)
PROPERTY = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


class Rollback(Exception):
    pass


def valid_endpoint(job: Job, **values: Any) -> Endpoint:
    fields: dict[str, Any] = {
        "job": job,
        "name": "health",
        "url": "https://example.com/health",
        "baseline_interval_ms": 60_000,
    }
    fields.update(values)
    return Endpoint(**fields)


def saves_or_refuses(endpoint: Endpoint) -> None:
    """Validation refuses it with a ValidationError, or PostgreSQL stores it."""
    try:
        endpoint.full_clean()
    except ValidationError as refused:
        assert refused.message_dict  # every problem is named by a field
        return
    try:
        with transaction.atomic():
            endpoint.save()
            raise Rollback
    except Rollback:
        pass


@PROPERTY
@given(field=st.sampled_from(USER_FIELDS), value=hostile)
def test_any_value_in_any_endpoint_field_is_refused_cleanly_or_stored(
    job: Job, field: str, value: Any
) -> None:
    saves_or_refuses(valid_endpoint(job, **{field: value}))


@PROPERTY
@given(values=st.dictionaries(st.sampled_from(USER_FIELDS), hostile, min_size=2, max_size=6))
def test_several_hostile_fields_at_once_are_refused_cleanly_or_stored(
    job: Job, values: dict[str, Any]
) -> None:
    saves_or_refuses(valid_endpoint(job, **values))


def database_state() -> list[Any]:
    return [
        list(Tenant.objects.values().order_by("pk")),
        list(Job.objects.values().order_by("pk")),
        list(Endpoint.objects.values().order_by("pk")),
    ]


def document(endpoint: dict[str, Any]) -> dict[str, Any]:
    return {
        "version": 1,
        "tenants": [{"name": "Acme", "jobs": [{"name": "ops", "endpoints": [endpoint]}]}],
    }


def imports_or_refuses(run: Callable[[], Any], before: list[Any]) -> None:
    try:
        run()
    except ConfigError as refused:
        assert refused.problems
        for problem in refused.problems:
            location, _, message = problem.partition(": ")
            assert location and message, problem  # "where: what", never a bare traceback
        assert database_state() == before  # a refused file changes nothing


@PROPERTY
@given(values=st.dictionaries(st.sampled_from(FILE_KEYS), hostile, min_size=1, max_size=5))
def test_any_value_for_any_endpoint_key_in_a_file_is_a_located_problem_or_imported(
    make_endpoint: Callable[..., Endpoint], values: dict[str, Any]
) -> None:
    if not Endpoint.objects.exists():
        make_endpoint(name="health", headers={"X-A": "1"})  # the file edits an endpoint
    entry = {"name": "health", "url": "https://example.com/", "baseline_interval": "5m"}
    entry.update(values)
    before = database_state()

    def run() -> None:
        with transaction.atomic():
            import_document(document(entry), environ={}, now=timezone.now())
            raise Rollback

    with contextlib.suppress(Rollback):
        imports_or_refuses(run, before)


TENANT_KEYS = (
    "name",
    "members",
    "max_endpoints",
    "min_interval",
    "monthly_token_budget",
    "hmac_secret",
)
JOB_KEYS = ("name", "description", "max_concurrent")


@PROPERTY
@given(
    tenant=st.dictionaries(st.sampled_from(TENANT_KEYS), hostile, max_size=3),
    job=st.dictionaries(st.sampled_from(JOB_KEYS), hostile, max_size=3),
)
def test_any_value_for_any_tenant_or_job_key_is_a_located_problem_or_imported(
    db: None, tenant: dict[str, Any], job: dict[str, Any]
) -> None:
    endpoint = {"name": "health", "url": "https://example.com/", "baseline_interval": "5m"}
    document = {
        "version": 1,
        "tenants": [
            {"name": "Acme", **tenant, "jobs": [{"name": "ops", **job, "endpoints": [endpoint]}]}
        ],
    }
    before = database_state()

    def run() -> None:
        with transaction.atomic():
            import_document(document, environ={}, now=timezone.now())
            raise Rollback

    with contextlib.suppress(Rollback):
        imports_or_refuses(run, before)


@PROPERTY
@given(
    text=st.one_of(st.text(max_size=300), st.sampled_from(HOSTILE_TEXT)),
    fmt=st.sampled_from(["yaml", "json"]),
)
def test_any_file_text_is_a_located_problem_or_imported(job: Job, text: str, fmt: str) -> None:
    before = database_state()

    def run() -> None:
        with transaction.atomic():
            import_config(text, fmt=fmt, environ={}, now=timezone.now())
            raise Rollback

    with contextlib.suppress(Rollback):
        imports_or_refuses(run, before)


# --- each rule, by name ---------------------------------------------------------------


def refused(job: Job, **values: Any) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as error:
        valid_endpoint(job, **values).full_clean()
    return error.value.message_dict


def test_text_in_a_number_field_is_a_message_not_a_type_error(job: Job) -> None:
    problems = refused(job, timeout_ms="abc", max_interval_ms=float("inf"))

    assert "timeout_ms" in problems and "max_interval_ms" in problems


@pytest.mark.parametrize(
    ("headers", "says"),
    [
        ({"X-A": "1\r\nX-Injected: yes"}, "control character"),
        ({"X-A": "nul\x00"}, "control character"),
        ({"X-A\r\n": "1"}, "is not a header name"),
        ({"X A": "1"}, "is not a header name"),
        ({"X:A": "1"}, "is not a header name"),
        ({"X-\x00": "1"}, "is not a header name"),
        ({"X-A": "1", "x-a": "2"}, "given twice"),
        ({"X-A": 1}, "names to string values"),
    ],
)
def test_header_names_are_tokens_and_values_hold_no_control_characters(
    job: Job, headers: dict[str, Any], says: str
) -> None:
    (message,) = refused(job, headers=headers)["headers"]

    assert says in message
    assert "yes" not in message  # a value is never repeated: it may be a secret


def test_a_secret_header_value_is_never_repeated_in_a_message(job: Job) -> None:
    (message,) = refused(job, headers={"Authorization": "Bearer s3cret\n"})["headers"]

    assert "s3cret" not in message and "Authorization" in message


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("name", "ops/health"),
        ("name", "health\x00"),
        ("url", "https://example.com/\x00"),
        ("timezone", "UTC\x00"),
        ("description", "about\x00"),
        ("secret_header_names", ["X-A\r\n"]),
        ("body", {"k": "nul\x00"}),
        ("body", {"k": float("nan")}),
        ("body", deep(10_000)),
    ],
)
def test_control_characters_slashes_and_impossible_json_are_refused(
    job: Job, field: str, value: Any
) -> None:
    assert field in refused(job, **{field: value})


@pytest.mark.parametrize(
    ("setting", "field", "value"),
    [
        ("CRONICORN_MAX_DESCRIPTION_CHARS", "description", "d" * 101),
        ("CRONICORN_MAX_HEADER_VALUE_CHARS", "headers", {"X-A": "v" * 101}),
        ("CRONICORN_MAX_BODY_BYTES", "body", {"k": "b" * 101}),
        ("CRONICORN_MAX_HEADERS", "headers", {f"X-{n}": "v" for n in range(101)}),
    ],
)
def test_size_caps_come_from_settings(
    job: Job, settings: Any, setting: str, field: str, value: Any
) -> None:
    setattr(settings, setting, 100)

    (message,) = refused(job, **{field: value})[field]

    assert "100" in message


def test_a_10_mb_description_is_refused_by_the_default_cap(job: Job) -> None:
    (message,) = refused(job, description="x" * 10_000_000)["description"]

    assert "4000 characters" in message


def test_job_names_and_descriptions_go_through_the_same_checks(tenant: Tenant) -> None:
    with pytest.raises(ValidationError) as error:
        Job(tenant=tenant, name="a/b", description="x\x00").full_clean()

    assert set(error.value.message_dict) == {"name", "description"}


def test_a_refused_import_names_the_key_and_writes_nothing(job: Job) -> None:
    before = database_state()
    entry = {
        "name": "health",
        "url": "https://example.com/",
        "baseline_interval": "5m",
        "headers": {"X-A": "1\r\nX-Injected: yes"},
        "description": "x" * 5_000,
    }

    with pytest.raises(ConfigError) as error:
        import_config(json.dumps(document(entry)), fmt="json", environ={}, now=timezone.now())

    where = "tenants[0].jobs[0].endpoints[0]"
    assert {p.split(": ")[0] for p in error.value.problems} == {
        f"{where}.headers",
        f"{where}.description",
    }
    assert database_state() == before


def test_the_admin_form_refuses_json_nested_10_000_deep_with_a_message(job: Job) -> None:
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.urls import reverse

    client = Client()
    client.force_login(get_user_model().objects.create_superuser("root", password="x"))
    data = endpoint_form(job, name="deep", method="POST", body="[" * 10_000 + "]" * 10_000)

    response = client.post(reverse("admin:endpoints_endpoint_add"), data)

    assert response.status_code == 200
    assert "This JSON is nested more than 32 levels deep" in response.content.decode()
    assert not Endpoint.objects.filter(name="deep").exists()


def test_a_reason_with_nul_is_refused_by_every_operation(
    make_endpoint: Callable[..., Endpoint],
) -> None:
    from datetime import timedelta

    from endpoints.operations import OperationRefused, apply_hint, pause_endpoint

    endpoint = make_endpoint()
    now = timezone.now()

    with pytest.raises(OperationRefused, match="control characters"):
        pause_endpoint(endpoint, now=now, until=now + timedelta(hours=1), reason="x\x00")
    with pytest.raises(OperationRefused, match="control characters"):
        apply_hint(endpoint, now=now, interval_ms=60_000, ttl=timedelta(hours=1), reason="\x00")
    endpoint.refresh_from_db()
    assert endpoint.paused_until is None and endpoint.ai_hint_expires_at is None


def test_a_framing_header_is_refused_rather_than_dropped_at_send_time(job: Job) -> None:
    (message,) = refused(job, headers={"host": "internal.example.com"})["headers"]

    assert message == "Cronicorn sets 'host' itself for each request; remove it."


def test_a_tenant_hmac_secret_with_nul_is_refused_without_repeating_it() -> None:
    with pytest.raises(ValidationError) as error:
        Tenant(name="Acme", hmac_secret="s3cret\x00").full_clean()

    (message,) = error.value.message_dict["hmac_secret"]
    assert "control characters" in message and "s3cret" not in message


def test_a_member_or_tenant_name_with_nul_is_a_located_problem(job: Job) -> None:
    document = {"version": 1, "tenants": [{"name": "Acme\x00", "members": ["al\x00ice"]}]}

    with pytest.raises(ConfigError) as error:
        import_document(document, environ={}, now=timezone.now())

    assert {p.split(": ")[0] for p in error.value.problems} == {
        "tenants[0].name",
        "tenants[0].members",
    }
