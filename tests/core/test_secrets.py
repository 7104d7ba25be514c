"""Secrets never leak: declared secret headers (in any letter case), URL passwords and
the environment an import may read. The rules live in endpoints/secrets.py."""

from __future__ import annotations

import base64
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse
from django.utils import timezone

from endpoints.config_io.documents import ConfigError
from endpoints.config_io.exporting import export_config
from endpoints.config_io.importing import import_config
from endpoints.models import Endpoint, Job, Run
from endpoints.operations import test_endpoint
from endpoints.secrets import MASK, mask_headers, redact_url, strip_userinfo
from tests.http_targets import TargetServer
from tests.world import World, endpoint_form


def one_endpoint_file(url: str, **entry: Any) -> str:
    endpoint = {"name": "health", "url": url, "baseline_interval": "5m", **entry}
    document = {
        "version": 1,
        "tenants": [{"name": "Acme", "jobs": [{"name": "ops", "endpoints": [endpoint]}]}],
    }
    return yaml.safe_dump(document)


# --- redirects --------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_declared_secret_header_is_not_sent_to_another_origin_after_a_redirect(
    make_endpoint: Callable[..., Endpoint], loopback_allowed: None
) -> None:
    with TargetServer() as first, TargetServer() as other:
        first.reply("/start", status=302, headers={"Location": other.url("/landing")})
        endpoint = make_endpoint(
            url=first.url("/start"),
            headers={"X-Partner": "p4rtner-secret", "X-Trace": "keep"},
            secret_header_names=["x-partner"],  # declared in another letter case
        )

        run = test_endpoint(endpoint)

        (started,) = first.hits("/start")
        (landed,) = other.hits("/landing")
    assert run.status == "success"
    assert started.headers["X-Partner"] == "p4rtner-secret"  # the origin gets it
    assert landed.headers["X-Trace"] == "keep"
    assert "X-Partner" not in landed.headers  # another origin never does


# --- URL passwords ----------------------------------------------------------------------


def test_a_url_password_is_masked_or_stripped_wherever_a_url_is_shown() -> None:
    url = "https://ops:pa:ss@word@example.com:8443/health?x=1"

    assert redact_url(url) == f"https://ops:{MASK}@example.com:8443/health?x=1"
    assert strip_userinfo(url) == "https://example.com:8443/health?x=1"
    assert redact_url("https://example.com/a@b") == "https://example.com/a@b"


@pytest.mark.django_db
def test_a_run_records_the_url_without_its_password_but_sends_the_credentials(
    make_endpoint: Callable[..., Endpoint], loopback_allowed: None, target: TargetServer
) -> None:
    url = target.url("/private").replace("http://", "http://ops:hunter2@")
    endpoint = make_endpoint(url=url)

    run = test_endpoint(endpoint)

    (hit,) = target.hits("/private")
    assert hit.headers["Authorization"] == "Basic " + base64.b64encode(b"ops:hunter2").decode()
    assert "hunter2" not in Run.objects.get(pk=run.pk).request_url
    assert run.request_url == target.url("/private")


def test_the_endpoint_form_masks_a_url_password_and_keeps_it_when_left_masked(
    world: World,
) -> None:
    endpoint = world.a.endpoint
    Endpoint.objects.filter(pk=endpoint.pk).update(url="https://ops:hunter2@example.com/h")
    client = world.client_for(world.alice)
    change = reverse("admin:endpoints_endpoint_change", args=[endpoint.pk])

    page = client.get(change).content.decode()
    response = client.post(change, _form(endpoint, url=f"https://ops:{MASK}@example.com/h2"))

    assert "hunter2" not in page and f"ops:{MASK}@example.com" in page
    assert response.status_code == 302
    endpoint.refresh_from_db()
    assert endpoint.url == "https://ops:hunter2@example.com/h2"


def _form(endpoint: Endpoint, **overrides: str) -> dict[str, str]:
    return endpoint_form(endpoint.job, **{"name": endpoint.name, "url": endpoint.url, **overrides})


@pytest.mark.django_db
def test_export_writes_a_url_password_as_a_reference_that_import_reads_back() -> None:
    import_config(
        one_endpoint_file("https://ops:hunter2@example.com/h"),
        fmt="yaml",
        environ={},
        now=timezone.now(),
    )

    document, references = export_config()
    exported = yaml.safe_dump(document)
    Endpoint.objects.all().delete()
    environ = {"CRONICORN_SECRET_ACME_OPS_HEALTH_URL_PASSWORD": "hunter2"}
    import_config(exported, fmt="yaml", environ=environ, now=timezone.now())

    assert "hunter2" not in exported
    assert references == ["CRONICORN_SECRET_ACME_OPS_HEALTH_URL_PASSWORD"]
    assert Endpoint.objects.get().url == "https://ops:hunter2@example.com/h"


# --- declared names in another case ----------------------------------------------------


@pytest.mark.django_db
def test_export_writes_a_reference_for_a_secret_header_declared_in_another_case(
    make_endpoint: Callable[..., Endpoint],
) -> None:
    make_endpoint(headers={"X-Partner": "p4rtner-secret"}, secret_header_names=["x-partner"])

    document, references = export_config()

    exported = yaml.safe_dump(document)
    assert "p4rtner-secret" not in exported
    assert "${CRONICORN_SECRET_ACME_OPS_ENDPOINT_1_X_PARTNER}" in exported
    assert references == ["CRONICORN_SECRET_ACME_OPS_ENDPOINT_1_X_PARTNER"]


def test_the_admin_masks_a_secret_header_declared_in_another_case(world: World) -> None:
    endpoint = world.a.endpoint
    Endpoint.objects.filter(pk=endpoint.pk).update(
        headers={"X-Partner": "p4rtner-secret"}, secret_header_names=["x-partner"]
    )
    page = world.client_for(world.alice).get(
        reverse("admin:endpoints_endpoint_change", args=[endpoint.pk])
    )

    assert "p4rtner-secret" not in page.content.decode()


# --- the environment an import may read ------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["DJANGO_SECRET_KEY", "CRONICORN_LLM_API_KEY", "HOME"])
def test_an_import_refuses_a_reference_outside_the_secret_namespace(name: str) -> None:
    text = one_endpoint_file(
        "https://collector.example.com/",
        headers={"X-Leak": "${" + name + "}"},
        secret_headers=["X-Leak"],
    )

    with pytest.raises(ConfigError) as refused:
        import_config(text, fmt="yaml", environ={name: "the-servers-own"}, now=timezone.now())

    (problem,) = refused.value.problems
    assert problem.startswith("tenants[0].jobs[0].endpoints[0].headers.X-Leak: ")
    assert "only environment variables named CRONICORN_SECRET_* are read" in problem
    assert "the-servers-own" not in problem
    assert not Endpoint.objects.exists()


@pytest.mark.django_db
def test_an_import_refuses_a_url_reference_outside_the_namespace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DJANGO_SECRET_KEY", "the-servers-own")
    path = tmp_path / "leak.yaml"
    path.write_text(one_endpoint_file("https://collector.example.com/?k=${DJANGO_SECRET_KEY}"))

    with pytest.raises(CommandError) as refused:
        call_command("import_endpoints", str(path), stdout=io.StringIO())

    assert "tenants[0].jobs[0].endpoints[0].url: ${DJANGO_SECRET_KEY} is not a secret" in str(
        refused.value
    )
    assert not Job.objects.exists()


# --- lookups that would read a masked value back ------------------------------------


@pytest.mark.parametrize(
    ("changelist", "query"),
    [
        ("admin:endpoints_endpoint_changelist", "headers__X-Partner__startswith=p"),
        ("admin:endpoints_endpoint_changelist", "headers__x-partner__contains=4"),
        ("admin:endpoints_endpoint_changelist", "url__contains=hunter"),
        ("admin:endpoints_endpoint_changelist", "job__tenant__hmac_secret__startswith=t"),
        ("admin:endpoints_run_changelist", "endpoint__headers__X-Partner__startswith=p"),
    ],
)
def test_a_changelist_lookup_on_a_secret_field_is_refused(
    world: World, changelist: str, query: str
) -> None:
    Endpoint.objects.filter(pk=world.a.endpoint.pk).update(
        headers={"X-Partner": "p4rtner-secret"},
        secret_header_names=["X-Partner"],
        url="https://ops:hunter2@example.com/h",
    )

    response = world.client_for(world.alice).get(f"{reverse(changelist)}?{query}")

    assert response.status_code == 400


def test_a_tenant_lookup_on_the_hmac_secret_is_refused_even_for_a_superuser(
    world: World,
) -> None:
    response = world.client_for(world.root).get(
        reverse("admin:endpoints_tenant_changelist") + "?hmac_secret__startswith=a"
    )

    assert response.status_code == 400


def test_a_search_never_matches_inside_a_url_password(world: World) -> None:
    endpoint = world.a.endpoint
    Endpoint.objects.filter(pk=endpoint.pk).update(url="https://ops:hunter2@example.com/h")
    client = world.client_for(world.alice)
    changelist = reverse("admin:endpoints_endpoint_changelist")

    probing = client.get(changelist, {"q": "hunter2"}).content.decode()
    by_name = client.get(changelist, {"q": endpoint.name}).content.decode()

    assert f"/{endpoint.pk}/change/" not in probing
    assert f"/{endpoint.pk}/change/" in by_name


def test_mask_headers_hides_named_and_secret_looking_values() -> None:
    headers = {
        "Authorization": "Bearer t",
        "X-Api-Key": "k",
        "X-Session-Token": "t",
        "Cookie": "c",
        "X-Tenant": "acme",
        "Accept": "application/json",
    }

    masked = mask_headers(headers, secret_names=["x-tenant"])

    assert masked == {
        "Authorization": MASK,
        "X-Api-Key": MASK,
        "X-Session-Token": MASK,
        "Cookie": MASK,
        "X-Tenant": MASK,
        "Accept": "application/json",
    }
