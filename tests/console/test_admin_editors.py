"""The field editors of the admin's run policy, headers and body (server side): one field
per policy key, the JSON text areas still the form underneath, the saved policy in words.
What a person does with them in a browser: test_admin_editors_browser.py."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from django.urls import reverse

from console.admin.policy_widgets import KINDS, POLICY_KEYS, UNEDITED_KEYS, policy_words
from endpoints.models import Endpoint, Job
from endpoints.policies import KEYS, resolve_policy
from endpoints.secrets import MASK
from tests.world import World, endpoint_form


def test_every_key_of_the_run_policy_has_a_field() -> None:
    # A key added to endpoints.policies without a PolicyKey line is kept, listed as one to
    # edit as JSON; this says which, so the line is added with the key.
    assert UNEDITED_KEYS == ()
    assert set(POLICY_KEYS) == set(KEYS)
    assert all(key.kind in KINDS for key in POLICY_KEYS.values())


def test_the_change_page_holds_the_fields_over_the_same_json_text_areas(world: World) -> None:
    endpoint = world.a.endpoint
    Endpoint.objects.filter(pk=endpoint.pk).update(
        headers={"Authorization": "Bearer s3cr3t-token"}, run_policy={"retry_attempts": 3}
    )
    url = reverse("admin:endpoints_endpoint_change", args=[endpoint.pk])
    page = world.client_for(world.alice).get(url).content.decode()

    # Without the script, the text areas are the form, as before.
    text_area = r'<textarea name="run_policy"[^>]*>\s*\{&quot;retry_attempts&quot;: 3\}</textarea>'
    assert re.search(text_area, page)
    assert re.search(r'<textarea name="headers"', page) and 'name="body"' in page
    assert set(re.findall(r'data-key="([a-z_]+)"', page)) == set(KEYS)
    assert '<div class="cc-editor" hidden>' in page  # shown by the script only
    assert "s3cr3t-token" not in page and MASK in page
    assert "console/editors.js" in page and "console/run_preview.js" in page
    assert "Attempts per slot: 3" in page  # the saved policy, in words


def test_the_job_page_edits_its_policy_with_the_same_fields(world: World) -> None:
    Job.objects.filter(pk=world.a.job.pk).update(run_policy={"breaker_failed_slots": 5})
    client = world.client_for(world.alice)
    url = reverse("admin:endpoints_job_change", args=[world.a.job.pk])

    page = client.get(url).content.decode()
    assert set(re.findall(r'data-key="([a-z_]+)"', page)) == set(KEYS)
    assert "Pause after failed slots: 5" in page

    data = {
        "tenant": str(world.a.tenant.pk),
        "name": world.a.job.name,
        "description": "",
        "max_concurrent": "",
        "run_policy": '{"breaker_failed_slots": 5, "jitter_ms": "soon"}',
    }
    errors = client.post(url, data).context["adminform"].form.errors
    assert errors["run_policy"] == ["jitter_ms: a whole number of ms got str."]


def test_a_policy_saved_by_the_fields_is_the_json_typed_before(world: World) -> None:
    """The editor writes the JSON a person typed before: the same validation, the same row."""
    policy = (
        '{"retry_attempts": 3, "retry_delay_ms": 10000, "allowed": [{"start": "09:00", '
        '"end": "17:00", "days": ["mon", "tue", "wed", "thu", "fri"]}]}'
    )
    response = world.client_for(world.alice).post(
        reverse("admin:endpoints_endpoint_add"), endpoint_form(world.a.job, run_policy=policy)
    )

    assert response.status_code == 302
    saved = Endpoint.objects.get(name="orders")
    assert saved.policy.allowed[0].words() == "09:00-17:00 mon,tue,wed,thu,fri"


def test_the_saved_policy_is_said_in_the_fields_labels() -> None:
    policy = resolve_policy(
        {"breaker_failed_slots": 5},
        {
            "allowed": [{"start": "09:00", "end": "17:00", "days": ["mon", "fri"]}],
            "backoff_cap_ms": None,
            "retry_delay_ms": 90_000,
            "expected_status": [200, "3xx"],
            "active_until": "2027-01-01T00:00:00+01:00",
        },
    )

    assert policy_words(policy, "Europe/Berlin") == [
        "Expected status: 200, 3xx",
        "Delay: 1 minute 30 seconds",
        "Backoff cap: no cap",
        "Pause after failed slots: 5",
        "Allowed hours: 09:00-17:00 mon,fri (Europe/Berlin)",
        "Until: 2026-12-31T23:00:00 UTC",
    ]
    assert policy.active_until == datetime(2026, 12, 31, 23, tzinfo=UTC)
    assert policy_words(resolve_policy({}, {})) == []
