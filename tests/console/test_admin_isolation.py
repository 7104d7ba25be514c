"""A staff member of tenant A never sees or touches tenant B through the admin.

Every change page, history page, delete page and operation of B's objects is a 404 for
A's member; lists, filters and autocomplete of A's member never name B's rows.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from django.urls import reverse

from console.admin.actions import OPERATIONS
from endpoints.models import Endpoint, HintHistory, Job, Run
from tests.world import TenantWorld, World, endpoint_form, operation_url

OBJECT_PAGES: dict[str, Callable[[TenantWorld], str]] = {
    "endpoint change": lambda t: reverse("admin:endpoints_endpoint_change", args=[t.endpoint.pk]),
    "endpoint history": lambda t: reverse("admin:endpoints_endpoint_history", args=[t.endpoint.pk]),
    "endpoint delete": lambda t: reverse("admin:endpoints_endpoint_delete", args=[t.endpoint.pk]),
    "job change": lambda t: reverse("admin:endpoints_job_change", args=[t.job.pk]),
    "job history": lambda t: reverse("admin:endpoints_job_history", args=[t.job.pk]),
    "job delete": lambda t: reverse("admin:endpoints_job_delete", args=[t.job.pk]),
    "run change": lambda t: reverse("admin:endpoints_run_change", args=[t.run.pk]),
    "run history": lambda t: reverse("admin:endpoints_run_history", args=[t.run.pk]),
    "hint change": lambda t: reverse("admin:endpoints_hinthistory_change", args=[t.hint.pk]),
    "session change": lambda t: reverse(
        "admin:planner_analysissession_change", args=[t.session.pk]
    ),
}

LISTS = [
    "admin:endpoints_endpoint_changelist",
    "admin:endpoints_job_changelist",
    "admin:endpoints_run_changelist",
    "admin:endpoints_hinthistory_changelist",
    "admin:planner_analysissession_changelist",
    "admin:index",
    "admin:app_list",
]


@pytest.mark.parametrize("page", sorted(OBJECT_PAGES))
def test_another_tenants_object_pages_are_not_found(world: World, page: str) -> None:
    client = world.client_for(world.alice)

    assert client.get(OBJECT_PAGES[page](world.b)).status_code == 404
    assert client.post(OBJECT_PAGES[page](world.b), {"post": "yes"}).status_code == 404


@pytest.mark.parametrize("name", sorted(OPERATIONS))
def test_another_tenants_endpoint_operations_are_not_found(world: World, name: str) -> None:
    before = Endpoint.objects.values().get(pk=world.b.endpoint.pk)

    response = world.client_for(world.alice).post(
        operation_url(world.b.endpoint, name), {"until": "2099-01-01T00:00"}
    )

    assert response.status_code == 404
    after = Endpoint.objects.values().get(pk=world.b.endpoint.pk)
    assert after == before
    assert (
        not HintHistory.objects.filter(endpoint=world.b.endpoint)
        .exclude(pk=world.b.hint.pk)
        .exists()
    )
    assert Run.objects.filter(endpoint=world.b.endpoint).count() == 1


@pytest.mark.parametrize("name", sorted(OPERATIONS))
def test_list_actions_ignore_another_tenants_selected_ids(world: World, name: str) -> None:
    before = Endpoint.objects.values().get(pk=world.b.endpoint.pk)

    world.client_for(world.alice).post(
        reverse("admin:endpoints_endpoint_changelist"),
        {
            "action": name,
            "_selected_action": [str(world.b.endpoint.pk)],
            "index": "0",
            "apply": "1",
            "until": "2099-01-01T00:00",
        },
    )

    assert Endpoint.objects.values().get(pk=world.b.endpoint.pk) == before


@pytest.mark.parametrize("name", ["pause_jobs", "resume_jobs"])
def test_job_actions_ignore_another_tenants_jobs(world: World, name: str) -> None:
    Job.objects.filter(pk=world.b.job.pk).update(status="paused" if "resume" in name else "active")
    before = Job.objects.get(pk=world.b.job.pk).status

    world.client_for(world.alice).post(
        reverse("admin:endpoints_job_changelist"),
        {"action": name, "_selected_action": [str(world.b.job.pk)], "index": "0"},
    )

    assert Job.objects.get(pk=world.b.job.pk).status == before


@pytest.mark.parametrize("query", ["", "?_facets=1"], ids=["plain", "with-counts"])
@pytest.mark.parametrize("url_name", LISTS)
def test_lists_and_their_filters_never_name_another_tenant(
    world: World, url_name: str, query: str
) -> None:
    Endpoint.objects.filter(pk=world.b.endpoint.pk).update(failure_count=9)
    client = world.client_for(world.alice)
    kwargs = {"app_label": "endpoints"} if url_name == "admin:app_list" else {}

    response = client.get(reverse(url_name, kwargs=kwargs) + query)

    assert response.status_code == 200
    text = response.content.decode()
    assert "beta-secret" not in text and "Beta" not in text
    if url_name != "admin:index" and url_name != "admin:app_list":
        assert "alpha" in text


@pytest.mark.parametrize(
    ("url_name", "param"),
    [
        ("admin:endpoints_endpoint_changelist", "job__id__exact"),
        ("admin:endpoints_run_changelist", "endpoint__job__id__exact"),
        ("admin:endpoints_hinthistory_changelist", "endpoint__job__id__exact"),
        ("admin:planner_analysissession_changelist", "endpoint__job__id__exact"),
    ],
)
def test_filtering_a_list_by_another_tenants_job_shows_nothing(
    world: World, url_name: str, param: str
) -> None:
    response = world.client_for(world.alice).get(reverse(url_name), {param: world.b.job.pk})

    text = response.content.decode()
    assert "beta-secret" not in text
    if response.status_code == 200:
        assert len(response.context["cl"].result_list) == 0


@pytest.mark.parametrize(
    "url_name",
    [
        "admin:endpoints_run_changelist",
        "admin:endpoints_hinthistory_changelist",
        "admin:planner_analysissession_changelist",
    ],
)
def test_filtering_records_by_another_tenants_endpoint_shows_nothing(
    world: World, url_name: str
) -> None:
    response = world.client_for(world.alice).get(
        reverse(url_name), {"endpoint": world.b.endpoint.pk}
    )

    assert response.status_code == 200
    assert len(response.context["cl"].result_list) == 0
    assert "beta-secret" not in response.content.decode()


@pytest.mark.parametrize("value", ["\u00b2", "1\u00b2"])
def test_filtering_records_by_an_endpoint_id_int_cannot_read_shows_nothing(
    world: World, value: str
) -> None:
    # "²" is a digit to str.isdigit, not to int: the page was a 500.
    response = world.client_for(world.alice).get(
        reverse("admin:endpoints_run_changelist"), {"endpoint": value}
    )

    assert response.status_code == 200
    assert len(response.context["cl"].result_list) == 0


def test_autocomplete_of_jobs_offers_only_the_users_tenants(world: World) -> None:
    def search(term: str) -> list[str]:
        response = world.client_for(world.alice).get(
            reverse("admin:autocomplete"),
            {
                "app_label": "endpoints",
                "model_name": "endpoint",
                "field_name": "job",
                "term": term,
            },
        )
        assert response.status_code == 200
        return [item["text"] for item in json.loads(response.content)["results"]]

    assert search("") == ["ops-alpha"]
    assert search("beta") == []


def test_autocomplete_of_a_model_the_user_cannot_see_is_refused(world: World) -> None:
    response = world.client_for(world.alice).get(
        reverse("admin:autocomplete"),
        {"app_label": "endpoints", "model_name": "job", "field_name": "tenant", "term": ""},
    )

    assert response.status_code == 403


def test_an_endpoint_cannot_be_created_in_another_tenants_job(world: World) -> None:
    response = world.client_for(world.alice).post(
        reverse("admin:endpoints_endpoint_add"),
        endpoint_form(world.b.job, name="sneaky"),
    )

    assert "Select a valid choice" in str(response.context["adminform"].form.errors["job"])
    assert not Endpoint.objects.filter(name="sneaky").exists()


def test_an_endpoint_cannot_be_moved_into_another_tenants_job(world: World) -> None:
    endpoint = world.a.endpoint
    response = world.client_for(world.alice).post(
        reverse("admin:endpoints_endpoint_change", args=[endpoint.pk]),
        endpoint_form(world.b.job, name=endpoint.name, url=endpoint.url),
    )

    assert response.status_code == 200
    assert Endpoint.objects.get(pk=endpoint.pk).job_id == world.a.job.pk


def test_a_job_cannot_be_created_for_another_tenant(world: World) -> None:
    client = world.client_for(world.alice)
    form = client.get(reverse("admin:endpoints_job_add")).content.decode()

    response = client.post(
        reverse("admin:endpoints_job_add"),
        {"tenant": str(world.b.tenant.pk), "name": "sneaky", "status": "active"},
    )

    assert "Beta" not in form
    assert response.status_code == 200
    assert not Job.objects.filter(name="sneaky").exists()


@pytest.mark.parametrize(
    "url",
    [
        lambda w: reverse("admin:endpoints_tenant_changelist"),
        lambda w: reverse("admin:endpoints_tenant_change", args=[w.a.tenant.pk]),
        lambda w: reverse("admin:endpoints_tenant_change", args=[w.b.tenant.pk]),
        lambda w: reverse("admin:endpoints_tenant_add"),
    ],
)
def test_tenants_are_managed_by_superusers_only(world: World, url: Callable[[World], str]) -> None:
    assert world.client_for(world.alice).get(url(world)).status_code == 403


def test_a_staff_user_of_no_tenant_sees_no_scheduler_data(world: World) -> None:
    from django.contrib.auth import get_user_model

    loner = get_user_model().objects.create_user("loner", is_staff=True)
    client = world.client_for(loner)

    index = client.get(reverse("admin:index")).content.decode()

    assert "alpha" not in index.lower() and "beta" not in index.lower()
    assert client.get(reverse("admin:endpoints_endpoint_changelist")).status_code == 403
    assert client.get(OBJECT_PAGES["run change"](world.a)).status_code in (403, 404)


def test_a_user_removed_from_a_tenant_loses_access_at_once(world: World) -> None:
    client = world.client_for(world.alice)
    url = OBJECT_PAGES["endpoint change"](world.a)
    assert client.get(url).status_code == 200

    world.a.tenant.members.remove(world.alice)

    assert client.get(url).status_code in (403, 404)
