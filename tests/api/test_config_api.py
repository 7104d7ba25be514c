"""Configuration as code through the REST API (api/routers/config.py): a key exports and
imports its own tenant's file, through the one importer (endpoints/config_io), and reaches
no other tenant, no tenant setting and none of the server's environment."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from django.test import Client

from endpoints.models import Endpoint, Job, Tenant
from tests.world import ApiWorld

pytestmark = pytest.mark.django_db


def api(key: str) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {key}")


def post_import(key: str, **body: Any) -> Any:
    return api(key).post("/api/v1/config/import", body, content_type="application/json")


def alpha_file(*endpoints: str, tenant: str = "Alpha", **tenant_keys: Any) -> str:
    entries = [
        {"name": name, "url": f"https://alpha.example.com/{name}", "baseline_interval": "5m"}
        for name in endpoints
    ]
    document = {
        "version": 1,
        "tenants": [
            {"name": tenant, **tenant_keys, "jobs": [{"name": "imported", "endpoints": entries}]}
        ],
    }
    return yaml.safe_dump(document)


def test_the_export_holds_the_keys_tenant_only_and_imports_back_unchanged(
    api_world: ApiWorld,
) -> None:
    answer = api(api_world.read_key).get("/api/v1/config")
    assert answer.status_code == 200, answer.content
    exported = answer.json()
    document = yaml.safe_load(exported["text"])
    assert [tenant["name"] for tenant in document["tenants"]] == ["Alpha"]
    assert "beta" not in exported["text"].lower()
    # The channel's target is a secret: a reference, named for the import.
    assert exported["secret_references"] == ["CRONICORN_SECRET_ALPHA_CHANNEL_ONCALL"]
    again = post_import(
        api_world.write_key,
        text=exported["text"],
        dry_run=True,
        secrets={"CRONICORN_SECRET_ALPHA_CHANNEL_ONCALL": "http://127.0.0.1:9/hook"},
    )
    assert again.status_code == 200, again.content
    assert again.json()["counts"]["created"] == 0
    assert again.json()["counts"]["updated"] == 0


def test_an_import_creates_the_files_endpoints_in_the_keys_tenant(api_world: ApiWorld) -> None:
    dry = post_import(api_world.write_key, text=alpha_file("one", "two"), dry_run=True)
    assert dry.status_code == 200, dry.content
    assert dry.json()["counts"]["created"] == 3  # the job and its two endpoints
    assert not Job.objects.filter(name="imported").exists()  # a dry run writes nothing

    done = post_import(api_world.write_key, text=alpha_file("one", "two"))
    assert done.status_code == 200, done.content
    job = Job.objects.get(name="imported")
    assert job.tenant_id == api_world.a.tenant.pk
    names = set(Endpoint.objects.filter(job=job).values_list("name", flat=True))
    assert names == {"one", "two"}
    assert all(e.next_run_at for e in Endpoint.objects.filter(job=job))


def test_a_file_naming_another_tenant_is_404_and_writes_nothing(api_world: ApiWorld) -> None:
    for tenant in ("Beta", "Nobody"):  # another's, and one that does not exist
        answer = post_import(api_world.write_key, text=alpha_file("x", tenant=tenant))
        assert answer.status_code == 404, answer.content
        assert f"No tenant named '{tenant}'" in answer.json()["detail"]
    assert not Job.objects.filter(name="imported").exists()
    assert not Tenant.objects.filter(name="Nobody").exists()


def test_a_key_may_not_change_its_tenants_settings_by_import(api_world: ApiWorld) -> None:
    answer = post_import(api_world.write_key, text=alpha_file("x", max_endpoints=100_000))
    assert answer.status_code == 422, answer.content
    problems = answer.json()["errors"]["text"]
    assert any("changed in the admin, not with an API key" in p for p in problems)
    assert Tenant.objects.get(pk=api_world.a.tenant.pk).max_endpoints != 100_000
    assert not Job.objects.filter(name="imported").exists()


def test_secrets_come_from_the_request_never_from_the_servers_environment(
    api_world: ApiWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRONICORN_SECRET_SERVER_ONLY", "the-servers-own-secret")
    text = alpha_file("x").replace(
        "https://alpha.example.com/x",
        "https://alpha.example.com/x?t=${CRONICORN_SECRET_SERVER_ONLY}",
    )
    refused = post_import(api_world.write_key, text=text)
    assert refused.status_code == 422, refused.content
    assert "CRONICORN_SECRET_SERVER_ONLY" in " ".join(refused.json()["errors"]["text"])
    assert "the-servers-own-secret" not in refused.content.decode()

    given = post_import(
        api_world.write_key, text=text, secrets={"CRONICORN_SECRET_SERVER_ONLY": "from-client"}
    )
    assert given.status_code == 200, given.content
    assert Endpoint.objects.get(job__name="imported", name="x").url.endswith("t=from-client")


def test_an_invalid_file_lists_every_problem_with_its_place(api_world: ApiWorld) -> None:
    text = alpha_file("x").replace("5m", "often")
    answer = post_import(api_world.write_key, text=text)
    assert answer.status_code == 422
    (problem,) = answer.json()["errors"]["text"]
    assert problem.startswith("tenants[0].jobs[0].endpoints[0].baseline_interval:"), problem


def test_a_read_key_may_export_but_not_import(api_world: ApiWorld) -> None:
    answer = post_import(api_world.read_key, text=alpha_file("x"), dry_run=True)
    assert answer.status_code == 403
    assert api(api_world.read_key).get("/api/v1/config", {"format": "json"}).status_code == 200


def test_an_export_of_a_job_the_tenant_does_not_have_names_the_filter(api_world: ApiWorld) -> None:
    mine = api(api_world.read_key).get("/api/v1/config", {"job": "ops-alpha"})
    assert mine.status_code == 200 and "alpha-orders" in mine.json()["text"]
    theirs = api(api_world.read_key).get("/api/v1/config", {"job": "beta-secret-job"})
    assert theirs.status_code == 422
    assert theirs.json()["errors"]["job"] == [
        "No job named 'beta-secret-job' in your tenant; leave job out for all."
    ]


def test_a_job_filter_postgresql_cannot_hold_is_refused_in_words(api_world: ApiWorld) -> None:
    answer = api(api_world.read_key).get("/api/v1/config", {"job": "ops\x00alpha"})
    assert answer.status_code == 422, answer.content  # not a 500 from PostgreSQL
    assert "no NUL and only valid Unicode" in answer.json()["errors"]["job"][0]
