"""The admin as the management UI: pages, forms, operations and the dashboard.

Tenant isolation has its own file (test_admin_isolation.py); scale in test_admin_scale.py.
"""

from __future__ import annotations

import re
import uuid
from datetime import timedelta

import pytest
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from endpoints.models import Endpoint, HintHistory, Job, Run, RunStatus, RunTrigger, Slot, Tenant
from endpoints.secrets import MASK
from planner.models import AnalysisSession
from tests.world import World, endpoint_form, operation_url


def messages_of(response: object) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]  # type: ignore[attr-defined]


# --- pages ------------------------------------------------------------------------------


def test_every_list_and_change_page_renders_for_a_tenant_member(world: World) -> None:
    client = world.client_for(world.alice)
    a = world.a
    pages = [
        reverse("admin:index"),
        reverse("admin:endpoints_job_changelist"),
        reverse("admin:endpoints_job_change", args=[a.job.pk]),
        reverse("admin:endpoints_job_add"),
        reverse("admin:endpoints_endpoint_changelist"),
        reverse("admin:endpoints_endpoint_change", args=[a.endpoint.pk]),
        reverse("admin:endpoints_endpoint_add"),
        reverse("admin:endpoints_run_changelist"),
        reverse("admin:endpoints_run_change", args=[a.run.pk]),
        reverse("admin:endpoints_hinthistory_changelist"),
        reverse("admin:endpoints_hinthistory_change", args=[a.hint.pk]),
        reverse("admin:planner_analysissession_changelist"),
        reverse("admin:planner_analysissession_change", args=[a.session.pk]),
    ]
    for url in pages:
        response = client.get(url)
        assert response.status_code == 200, url


def test_a_superuser_sees_every_tenant_and_the_tenant_admin(world: World) -> None:
    client = world.client_for(world.root)

    endpoints = client.get(reverse("admin:endpoints_endpoint_changelist")).content.decode()
    tenants = client.get(reverse("admin:endpoints_tenant_changelist")).content.decode()
    tenant_page = client.get(reverse("admin:endpoints_tenant_change", args=[world.b.tenant.pk]))

    assert "alpha-orders" in endpoints and "beta-secret-endpoint" in endpoints
    assert "Alpha" in tenants and "Beta" in tenants and "1 / 100" in tenants
    assert tenant_page.status_code == 200


def test_the_endpoint_list_shows_schedule_next_run_last_status_and_badges(world: World) -> None:
    now = timezone.now()
    Endpoint.objects.filter(pk=world.a.endpoint.pk).update(
        paused_until=now + timedelta(hours=2),
        ai_hint_interval_ms=30_000,
        ai_hint_expires_at=now + timedelta(hours=1),
        ai_hint_reason="queue is deep",
        failure_count=3,
    )
    html = world.client_for(world.alice).get(reverse("admin:endpoints_endpoint_changelist"))
    text = html.content.decode()

    assert "every 5 minutes" in text
    assert "(a pause)" in text or "(the baseline interval)" in text
    assert 'cc-badge cc-failure">failure<' in text  # last run status, from the annotation
    assert "paused until" in text
    assert "hint: every 30s" in text and 'title="queue is deep"' in text
    assert re.search(r'<td class="field-failure_count">3</td>', text)


@pytest.mark.parametrize(
    ("status", "shown", "hidden"),
    [
        ("healthy", "alpha-healthy", "alpha-orders"),
        ("failing", "alpha-orders", "alpha-healthy"),
        ("paused", "alpha-paused", "alpha-healthy"),
        ("hinted", "alpha-hinted", "alpha-healthy"),
        ("archived", "alpha-archived", "alpha-healthy"),
    ],
)
def test_the_status_filter_picks_endpoints_by_state(
    world: World, status: str, shown: str, hidden: str
) -> None:
    now = timezone.now()
    Endpoint.objects.filter(pk=world.a.endpoint.pk).update(failure_count=2)
    world.add_endpoint(world.a.job, "alpha-healthy")
    world.add_endpoint(world.a.job, "alpha-paused", paused_until=now + timedelta(hours=1))
    world.add_endpoint(
        world.a.job,
        "alpha-hinted",
        ai_hint_interval_ms=10_000,
        ai_hint_expires_at=now + timedelta(minutes=10),
    )
    world.add_endpoint(world.a.job, "alpha-archived", archived_at=now)

    url = reverse("admin:endpoints_endpoint_changelist") + f"?status={status}"
    text = world.client_for(world.alice).get(url).content.decode()

    assert f">{shown}<" in text
    assert f">{hidden}<" not in text


def test_endpoints_are_searched_by_name_and_url(world: World) -> None:
    world.add_endpoint(world.a.job, "inventory", url="https://stock.example.com/levels")
    client = world.client_for(world.alice)
    url = reverse("admin:endpoints_endpoint_changelist")

    by_url = client.get(url, {"q": "stock.example"}).content.decode()
    by_name = client.get(url, {"q": "alpha-ord"}).content.decode()

    assert ">inventory<" in by_url and ">alpha-orders<" not in by_url
    assert ">alpha-orders<" in by_name and ">inventory<" not in by_name


def test_the_endpoint_page_explains_the_next_run_and_shows_hints_runs_and_sessions(
    world: World,
) -> None:
    now = timezone.now()
    Endpoint.objects.filter(pk=world.a.endpoint.pk).update(
        ai_hint_interval_ms=20_000,
        ai_hint_expires_at=now + timedelta(minutes=30),
        ai_hint_reason="error rate is climbing",
    )
    response = world.client_for(world.alice).get(
        reverse("admin:endpoints_endpoint_change", args=[world.a.endpoint.pk])
    )
    text = response.content.decode()

    assert "Planned now, the governor says: Next run in 20 seconds" in text
    assert "set by an interval hint" in text
    assert "Every 20s</strong>, expires" in text and "error rate is climbing" in text
    assert "<svg" in text and 'fill="#c62828"' in text  # the failed run, in red
    assert reverse("admin:endpoints_run_change", args=[world.a.run.pk]) in text
    assert reverse("admin:planner_analysissession_change", args=[world.a.session.pk]) in text
    assert 'value="5m"' in text  # the interval shown as a person writes it
    for section in ("Request", "Schedule", "Limits", "Planner description", "State"):
        assert f">{section}</h2>" in text


# --- forms ------------------------------------------------------------------------------


def test_an_endpoint_created_with_a_5m_interval_is_scheduled_at_once(world: World) -> None:
    client = world.client_for(world.alice)
    before = timezone.now()

    response = client.post(reverse("admin:endpoints_endpoint_add"), endpoint_form(world.a.job))

    assert response.status_code == 302, response.content.decode()[:3000]
    endpoint = Endpoint.objects.get(name="orders")
    assert endpoint.baseline_interval_ms == 300_000 and endpoint.timeout_ms == 30_000
    assert endpoint.next_run_at is not None
    assert before + timedelta(minutes=5) <= endpoint.next_run_at
    assert endpoint.next_run_at <= timezone.now() + timedelta(minutes=5)
    assert endpoint.next_run_source == "baseline-interval"


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"baseline_interval_ms": "", "baseline_cron": "61 * * * *"}, "baseline_cron", "cron"),
        ({"baseline_interval_ms": "", "baseline_cron": "* * *"}, "baseline_cron", "needs 5"),
        ({"baseline_interval_ms": "5 minutes"}, "baseline_interval_ms", "unknown unit"),
        ({"baseline_interval_ms": "500ms"}, "baseline_interval_ms", "at least 1 s"),
        ({"baseline_interval_ms": ""}, "baseline_interval_ms", "Give a schedule"),
        ({"baseline_cron": "@daily"}, "baseline_cron", "not both"),
        ({"timezone": "Mars/Olympus"}, "timezone", "IANA"),
        ({"timeout_ms": "2h"}, "timeout_ms", "between 1 s and 30 min"),
        ({"min_interval_ms": "1h", "max_interval_ms": "1m"}, "min_interval_ms", "above the max"),
        ({"url": "ftp://example.com/x"}, "url", "URL"),
        ({"headers": '{"X-Key": 5}'}, "headers", "string values"),
    ],
)
def test_bad_input_gets_a_message_on_the_field_that_is_wrong(
    world: World, overrides: dict[str, str], field: str, message: str
) -> None:
    response = world.client_for(world.alice).post(
        reverse("admin:endpoints_endpoint_add"), endpoint_form(world.a.job, **overrides)
    )

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert field in errors, errors
    assert message in " ".join(errors[field]), errors[field]
    assert not Endpoint.objects.filter(name="orders").exists()


def test_creating_an_endpoint_past_the_tenant_quota_is_refused(world: World) -> None:
    Tenant.objects.filter(pk=world.a.tenant.pk).update(max_endpoints=1)

    response = world.client_for(world.alice).post(
        reverse("admin:endpoints_endpoint_add"), endpoint_form(world.a.job)
    )

    errors = response.context["adminform"].form.errors
    assert "would have 2 endpoints but max_endpoints is 1" in errors["job"][0]
    assert not Endpoint.objects.filter(name="orders").exists()


def test_an_interval_below_the_tenant_minimum_is_refused(world: World) -> None:
    Tenant.objects.filter(pk=world.a.tenant.pk).update(min_interval_ms=60_000)

    response = world.client_for(world.alice).post(
        reverse("admin:endpoints_endpoint_add"),
        endpoint_form(world.a.job, baseline_interval_ms="30s"),
    )

    errors = response.context["adminform"].form.errors
    assert "at least 60000 ms" in errors["baseline_interval_ms"][0]


def test_a_schedule_change_reschedules_and_other_edits_do_not(world: World) -> None:
    client = world.client_for(world.alice)
    endpoint = world.a.endpoint
    url = reverse("admin:endpoints_endpoint_change", args=[endpoint.pk])
    far = timezone.now() + timedelta(days=3)
    Endpoint.objects.filter(pk=endpoint.pk).update(failure_count=0)
    Slot.objects.filter(pk=endpoint.pk).update(next_run_at=far)
    data = endpoint_form(world.a.job, name=endpoint.name, url=endpoint.url)

    client.post(url, {**data, "baseline_interval_ms": "5m", "description": "new words"})
    endpoint.refresh_from_db()
    assert endpoint.next_run_at == far and endpoint.description == "new words"

    client.post(url, {**data, "baseline_interval_ms": "1m"})
    endpoint.refresh_from_db()
    assert endpoint.baseline_interval_ms == 60_000
    assert endpoint.next_run_at is not None
    assert endpoint.next_run_at <= timezone.now() + timedelta(minutes=1)


def test_secret_header_values_are_masked_and_survive_a_save(world: World) -> None:
    endpoint = world.a.endpoint
    Endpoint.objects.filter(pk=endpoint.pk).update(
        headers={"Authorization": "Bearer s3cr3t-token", "X-Team": "ops"},
        secret_header_names=["Authorization"],
    )
    client = world.client_for(world.alice)
    url = reverse("admin:endpoints_endpoint_change", args=[endpoint.pk])

    page = client.get(url).content.decode()
    assert "s3cr3t-token" not in page and MASK in page and "ops" in page

    headers = f'{{"Authorization": "{MASK}", "X-Team": "platform"}}'
    data = endpoint_form(world.a.job, name=endpoint.name, url=endpoint.url, headers=headers)
    response = client.post(url, data)

    assert response.status_code == 302
    endpoint.refresh_from_db()
    assert endpoint.headers == {"Authorization": "Bearer s3cr3t-token", "X-Team": "platform"}


def test_a_mask_typed_for_a_header_with_no_stored_value_is_refused(world: World) -> None:
    headers = f'{{"X-Api-Key": "{MASK}"}}'
    response = world.client_for(world.alice).post(
        reverse("admin:endpoints_endpoint_add"), endpoint_form(world.a.job, headers=headers)
    )

    assert "type the real value" in response.context["adminform"].form.errors["headers"][0]


def test_a_superuser_manages_tenant_members_and_quotas(world: World) -> None:
    client = world.client_for(world.root)
    tenant = world.a.tenant
    Tenant.objects.filter(pk=tenant.pk).update(hmac_secret="keep-me")

    response = client.post(
        reverse("admin:endpoints_tenant_change", args=[tenant.pk]),
        {
            "name": "Alpha",
            "members": [str(world.alice.pk), str(world.bob.pk)],
            "max_endpoints": "7",
            "min_interval_ms": "5000",
            "monthly_token_budget": "1000",
            "hmac_secret": "",
        },
    )

    assert response.status_code == 302
    tenant.refresh_from_db()
    assert tenant.max_endpoints == 7 and tenant.hmac_secret == "keep-me"
    assert set(tenant.members.all()) == {world.alice, world.bob}
    page = client.get(reverse("admin:endpoints_tenant_change", args=[tenant.pk]))
    assert "keep-me" not in page.content.decode()


# --- operations -------------------------------------------------------------------------


def test_pausing_for_an_hour_and_resuming_from_the_change_page(world: World) -> None:
    client = world.client_for(world.alice)
    endpoint = world.a.endpoint

    paused = client.post(operation_url(endpoint, "pause_1h"), follow=True)
    endpoint.refresh_from_db()
    assert endpoint.paused_until is not None
    assert endpoint.paused_until > timezone.now() + timedelta(minutes=59)
    assert endpoint.next_run_source == "paused"
    assert any("Paused ops-alpha/alpha-orders until" in m for m in messages_of(paused))
    assert HintHistory.objects.filter(endpoint=endpoint, kind="pause").exists()

    resumed = client.post(operation_url(endpoint, "resume"), follow=True)
    endpoint.refresh_from_db()
    assert endpoint.paused_until is None or endpoint.paused_until <= timezone.now()
    assert any("Resumed ops-alpha/alpha-orders." in m for m in messages_of(resumed))


def test_pausing_until_a_chosen_time_and_refusing_a_past_one(world: World) -> None:
    client = world.client_for(world.alice)
    endpoint = world.a.endpoint
    until = (timezone.now() + timedelta(days=2)).replace(second=0, microsecond=0)

    client.post(operation_url(endpoint, "pause_until"), {"until": f"{until:%Y-%m-%dT%H:%M}"})
    endpoint.refresh_from_db()
    assert endpoint.paused_until == until

    past = client.post(
        operation_url(endpoint, "pause_until"), {"until": "2001-01-01T00:00"}, follow=True
    )
    assert any("already passed" in m for m in messages_of(past))
    endpoint.refresh_from_db()
    assert endpoint.paused_until == until


def test_run_now_asks_for_a_run_at_once(world: World) -> None:
    endpoint = world.a.endpoint
    Run.objects.filter(endpoint=endpoint).update(status=RunStatus.FAILURE)
    Slot.objects.filter(pk=endpoint.pk).update(next_run_at=timezone.now() + timedelta(days=1))

    response = world.client_for(world.alice).post(operation_url(endpoint, "run_now"), follow=True)

    endpoint.refresh_from_db()
    assert endpoint.next_run_at is not None
    assert endpoint.next_run_at <= timezone.now()
    assert any("Run requested for ops-alpha/alpha-orders" in m for m in messages_of(response))


def test_run_now_while_a_run_is_in_flight_shows_the_refusal(world: World) -> None:
    endpoint = world.a.endpoint
    run = world.add_run(endpoint, status=RunStatus.RUNNING)
    Slot.objects.filter(pk=endpoint.pk).update(
        claim_token=uuid.uuid4(), locked_until=timezone.now() + timedelta(minutes=1)
    )

    response = world.client_for(world.alice).post(operation_url(endpoint, "run_now"), follow=True)

    errors = [str(m) for m in get_messages(response.wsgi_request) if m.level_tag == "error"]
    assert len(errors) == 1, messages_of(response)
    assert errors[0].startswith("ops-alpha/alpha-orders is running now")
    assert f"run {run.pk} started" in errors[0] and "wait for it to finish" in errors[0]


def test_run_now_on_a_paused_endpoint_says_to_resume_first(world: World) -> None:
    endpoint = world.a.endpoint
    Endpoint.objects.filter(pk=endpoint.pk).update(paused_until=timezone.now() + timedelta(hours=1))

    response = world.client_for(world.alice).post(operation_url(endpoint, "run_now"), follow=True)

    assert any("resume it first" in m for m in messages_of(response))


def test_a_test_request_records_a_test_run_and_shows_its_result(
    world: World, httpserver: object, settings: object
) -> None:
    settings.CRONICORN_ALLOW_PRIVATE_ADDRESSES = True  # type: ignore[attr-defined]
    httpserver.expect_request("/probe").respond_with_json({"status": "healthy"})  # type: ignore[attr-defined]
    endpoint = world.a.endpoint
    Endpoint.objects.filter(pk=endpoint.pk).update(url=httpserver.url_for("/probe"))  # type: ignore[attr-defined]
    next_before = Endpoint.objects.get(pk=endpoint.pk).next_run_at

    response = world.client_for(world.alice).post(operation_url(endpoint, "test"), follow=True)

    run = Run.objects.get(endpoint=endpoint, trigger=RunTrigger.TEST)
    assert run.status == RunStatus.SUCCESS and run.response_body == {"status": "healthy"}
    shown = " ".join(messages_of(response))
    assert "Test request to ops-alpha/alpha-orders: success (HTTP 200" in shown
    assert reverse("admin:endpoints_run_change", args=[run.pk]) in shown
    assert Endpoint.objects.get(pk=endpoint.pk).next_run_at == next_before


def test_clear_hints_reset_failures_and_archive_from_the_change_page(world: World) -> None:
    client = world.client_for(world.alice)
    endpoint = world.a.endpoint
    Endpoint.objects.filter(pk=endpoint.pk).update(
        ai_hint_interval_ms=10_000,
        ai_hint_expires_at=timezone.now() + timedelta(hours=1),
        ai_hint_reason="x",
        failure_count=4,
    )

    client.post(operation_url(endpoint, "clear_hints"))
    client.post(operation_url(endpoint, "reset_failures"))
    endpoint.refresh_from_db()
    assert endpoint.ai_hint_interval_ms is None and endpoint.failure_count == 0

    client.post(operation_url(endpoint, "archive"))
    endpoint.refresh_from_db()
    assert endpoint.archived_at is not None


def test_operations_refuse_get_and_unknown_names(world: World) -> None:
    client = world.client_for(world.alice)

    assert client.get(operation_url(world.a.endpoint, "pause_1h")).status_code == 405
    assert client.post(operation_url(world.a.endpoint, "explode")).status_code == 404
    world.a.endpoint.refresh_from_db()
    assert world.a.endpoint.paused_until is None


def test_operations_need_the_csrf_token(world: World) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(world.alice)

    response = client.post(operation_url(world.a.endpoint, "pause_1h"))

    assert response.status_code == 403
    world.a.endpoint.refresh_from_db()
    assert world.a.endpoint.paused_until is None


def test_list_actions_apply_to_every_selected_endpoint(world: World) -> None:
    second = world.add_endpoint(world.a.job, "alpha-second")
    client = world.client_for(world.alice)
    url = reverse("admin:endpoints_endpoint_changelist")
    selected = [str(world.a.endpoint.pk), str(second.pk)]

    response = client.post(
        url, {"action": "pause_24h", "_selected_action": selected, "index": "0"}, follow=True
    )

    assert Endpoint.objects.filter(pk__in=selected, paused_until__isnull=False).count() == 2
    assert "Pause for 24 hours: done for 2 endpoints." in messages_of(response)


def test_pause_until_from_the_list_asks_for_the_time_first(world: World) -> None:
    client = world.client_for(world.alice)
    url = reverse("admin:endpoints_endpoint_changelist")
    selected = [str(world.a.endpoint.pk)]
    until = (timezone.now() + timedelta(hours=5)).replace(second=0, microsecond=0)

    step = client.post(url, {"action": "pause_until", "_selected_action": selected, "index": "0"})
    assert step.status_code == 200 and "Pause until a time" in step.content.decode()
    assert Endpoint.objects.get(pk=world.a.endpoint.pk).paused_until is None

    client.post(
        url,
        {
            "action": "pause_until",
            "_selected_action": selected,
            "apply": "1",
            "until": f"{until:%Y-%m-%dT%H:%M}",
        },
    )
    assert Endpoint.objects.get(pk=world.a.endpoint.pk).paused_until == until


def test_a_member_creates_a_job_in_their_tenant(world: World) -> None:
    response = world.client_for(world.alice).post(
        reverse("admin:endpoints_job_add"),
        {"tenant": str(world.a.tenant.pk), "name": "billing", "status": "active"},
    )

    assert response.status_code == 302
    assert Job.objects.get(name="billing").tenant == world.a.tenant


def test_jobs_are_paused_and_resumed_from_the_list(world: World) -> None:
    client = world.client_for(world.alice)
    url = reverse("admin:endpoints_job_changelist")
    selected = [str(world.a.job.pk)]

    client.post(url, {"action": "pause_jobs", "_selected_action": selected, "index": "0"})
    assert Job.objects.get(pk=world.a.job.pk).status == "paused"
    client.post(url, {"action": "resume_jobs", "_selected_action": selected, "index": "0"})
    assert Job.objects.get(pk=world.a.job.pk).status == "active"


# --- records ----------------------------------------------------------------------------


def test_a_run_page_shows_the_request_pretty_json_timings_and_error(world: World) -> None:
    text = (
        world.client_for(world.alice)
        .get(reverse("admin:endpoints_run_change", args=[world.a.run.pk]))
        .content.decode()
    )

    assert "<code>GET https://alpha.example.com/orders</code>" in text
    assert '<pre class="cc-json">{\n  &quot;' in text and "\n  &quot;queue_depth&quot;: 42" in text
    assert "upstream said 503" in text and "1500 ms" in text and "late by" in text.lower()
    assert 'name="_save"' not in text  # records are read-only


def test_a_run_page_shows_the_headers_it_kept(world: World) -> None:
    Run.objects.filter(pk=world.a.run.pk).update(response_headers={"retry-after": "120"})
    page = reverse("admin:endpoints_run_change", args=[world.a.run.pk])

    text = world.client_for(world.alice).get(page).content.decode()

    assert "headers kept" in text.lower()
    assert "&quot;retry-after&quot;: &quot;120&quot;" in text


def test_runs_are_filtered_by_status_trigger_source_endpoint_and_date(world: World) -> None:
    other = world.add_endpoint(world.a.job, "alpha-other")
    world.add_run(other, status=RunStatus.SUCCESS, trigger=RunTrigger.TEST, source="manual")
    world.add_run(other, status=RunStatus.SUCCESS, started_at=timezone.now() - timedelta(days=3))
    client = world.client_for(world.alice)
    url = reverse("admin:endpoints_run_changelist")

    def listed(**params: str) -> int:
        return len(client.get(url, params).context["cl"].result_list)

    assert listed() == 3
    assert listed(status="failure") == 1
    assert listed(trigger__exact="test") == 1
    assert listed(source="manual") == 1
    assert listed(endpoint=str(other.pk)) == 2
    assert listed(started="24h") == 2
    assert listed(**{"endpoint__job__id__exact": str(world.a.job.pk)}) == 3


def test_records_cannot_be_added_changed_or_deleted(world: World) -> None:
    client = world.client_for(world.root)
    run = world.a.run

    assert client.get(reverse("admin:endpoints_run_add")).status_code == 403
    assert client.get(reverse("admin:endpoints_run_delete", args=[run.pk])).status_code == 403
    client.post(reverse("admin:endpoints_run_change", args=[run.pk]), {"status": "success"})
    run.refresh_from_db()
    assert run.status == RunStatus.FAILURE


def test_a_session_page_renders_tool_calls_reasoning_and_tokens(world: World) -> None:
    text = (
        world.client_for(world.alice)
        .get(reverse("admin:planner_analysissession_change", args=[world.a.session.pk]))
        .content.decode()
    )

    assert "1. get_latest_response" in text and "2. propose_interval" in text
    assert "&quot;intervalMs&quot;: 30000" in text
    assert "<strong>refused:</strong> ttlMinutes must be" in text
    assert "Queue is growing; tightening." in text
    assert "1,234 total (1,000 prompt, 234 completion)" in text


def test_the_hint_history_lists_who_wrote_each_hint(world: World) -> None:
    text = (
        world.client_for(world.alice)
        .get(reverse("admin:endpoints_hinthistory_changelist"))
        .content.decode()
    )

    assert "every 30s" in text
    assert f"planner session {world.a.session.pk}" in text


# --- dashboard --------------------------------------------------------------------------


def test_the_dashboard_shows_health_failing_endpoints_and_planner_usage(world: World) -> None:
    Endpoint.objects.filter(pk=world.a.endpoint.pk).update(failure_count=2)
    Endpoint.objects.filter(pk=world.b.endpoint.pk).update(failure_count=5)
    from endpoints.models import Heartbeat

    Heartbeat.beat("tick", now=timezone.now() - timedelta(seconds=3))

    text = world.client_for(world.alice).get(reverse("admin:index")).content.decode()

    assert 'id="cc-dashboard"' in text and "s ago" in text
    assert "(counts over your tenants)" in text
    failing = text.split('id="cc-failing"')[1].split('id="cc-planner"')[0]
    assert "ops-alpha/alpha-orders" in failing and "upstream said 503" in failing
    assert "beta" not in failing.lower()
    planner = text.split('id="cc-planner"')[1]
    assert "Alpha" in planner and "1,234 (1%)" in planner and "Beta" not in planner
    runs = text.split('id="cc-runs-hour"')[1].split("</div></div>")[0]
    assert 'cc-value">1<' in runs  # only Alpha's run in the last hour


def test_the_dashboard_says_so_when_no_scheduler_has_ticked(world: World) -> None:
    text = world.client_for(world.root).get(reverse("admin:index")).content.decode()

    assert "never" in text.split('id="cc-last-tick"')[1][:300]
    assert "cc-tile cc-bad" in text


def test_the_sessions_list_is_read_only_and_scoped(world: World) -> None:
    text = (
        world.client_for(world.alice)
        .get(reverse("admin:planner_analysissession_changelist"))
        .content.decode()
    )

    assert "alpha-orders" in text and "beta-secret" not in text
    assert AnalysisSession.objects.count() == 2
