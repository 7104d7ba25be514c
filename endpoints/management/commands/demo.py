"""``manage.py demo``: an admin user, a demo tenant and a job of endpoints to watch adapt."""

from __future__ import annotations

import secrets
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction
from django.utils import timezone

from endpoints.governor import EndpointSchedule, plan_next_run
from endpoints.models import Endpoint, Job, Tenant

DEMO_TENANT = "Demo"
DEMO_JOB = "demo"
ADMIN_USERNAME = "admin"


def demo_endpoint_fields(base_url: str) -> dict[str, dict[str, Any]]:
    """The demo endpoints by name, as Endpoint field values."""
    root = base_url.rstrip("/")
    return {
        "queue-depth": {
            "url": f"{root}/demo/queue/",
            "baseline_interval_ms": 30_000,
            "min_interval_ms": 10_000,
            "max_interval_ms": 300_000,
            "description": "Order queue depth. Check often while it is deep or rising; "
            "relax when it has drained.",
        },
        "health": {
            "url": f"{root}/demo/health/",
            "baseline_interval_ms": 60_000,
            "min_interval_ms": 15_000,
            "max_interval_ms": 600_000,
            "description": "Service health and error rate. Watch closely when degraded or "
            "critical.",
        },
        "thresholds": {
            "url": f"{root}/demo/thresholds/",
            "baseline_cron": "*/2 * * * *",
            "timezone": "Europe/Berlin",
            "min_interval_ms": 20_000,
            "description": "A gauge with warning and critical thresholds; sample more often "
            "above the warning level.",
        },
        "ingest": {
            "url": f"{root}/demo/ingest/",
            "method": "POST",
            "body": {"batch": "demo", "source": "cronicorn"},
            "headers": {"Authorization": "Bearer demo-token"},
            "secret_header_names": ["Authorization"],
            "baseline_interval_ms": 120_000,
            "description": "Pushes a batch; the answer reports the queue depth it caused.",
        },
        "rate-limited": {
            "url": f"{root}/demo/rate-limited/",
            "baseline_interval_ms": 30_000,
            "max_interval_ms": 300_000,
            "description": "A partner API that answers 429 with Retry-After for one minute in "
            "five; back off until the time it names.",
        },
    }


class Command(BaseCommand):
    help = (
        "Create (or refresh) a demo: superuser 'admin', tenant 'Demo' and job 'demo' with "
        "endpoints against this web app's built-in /demo/<name>/ targets, whose JSON "
        "changes over time (queue depth, health, thresholds, a 429 with Retry-After). "
        "Safe to run again: it resets the demo endpoints' definitions and the admin password."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--password",
            help="Password for the 'admin' superuser (default: a random one, printed).",
        )
        parser.add_argument(
            "--base-url",
            default="http://127.0.0.1:8000",
            help="Where the web app (and so /demo/...) is reachable from the scheduler "
            "(default: http://127.0.0.1:8000).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        password = options["password"] or secrets.token_urlsafe(12)
        now = timezone.now()
        with transaction.atomic():
            user = ensure_admin(password)
            tenant, _ = Tenant.objects.get_or_create(name=DEMO_TENANT)
            tenant.members.add(user)
            job, _ = Job.objects.get_or_create(tenant=tenant, name=DEMO_JOB)
            if job.status != Job.Status.ACTIVE:
                Job.objects.filter(pk=job.pk).update(status=Job.Status.ACTIVE)
            endpoints = [
                upsert_demo_endpoint(job, name, fields, now=now)
                for name, fields in demo_endpoint_fields(options["base_url"]).items()
            ]
        self.stdout.write(f"Demo ready: tenant {DEMO_TENANT!r}, job {DEMO_JOB!r}.")
        for endpoint in endpoints:
            self.stdout.write(f"  {endpoint.ref:<22} {endpoint.url}")
        self.stdout.write(f"Sign in at {options['base_url'].rstrip('/')}/admin/ as")
        self.stdout.write(f"  user: {ADMIN_USERNAME}  password: {password}")
        if not settings.CRONICORN_ALLOW_PRIVATE_ADDRESSES:
            self.stderr.write(
                "Note: CRONICORN_ALLOW_PRIVATE_ADDRESSES is off, so the scheduler will refuse "
                "127.0.0.1; set it to true (or add the host to CRONICORN_SSRF_ALLOWLIST)."
            )


def ensure_admin(password: str) -> Any:
    user_model = get_user_model()
    user, _ = user_model.objects.get_or_create(username=ADMIN_USERNAME)
    user.is_staff = True
    user.is_superuser = True
    user.is_active = True
    user.set_password(password)
    user.save(update_fields=["is_staff", "is_superuser", "is_active", "password"])
    return user


def upsert_demo_endpoint(job: Job, name: str, fields: dict[str, Any], *, now: Any) -> Endpoint:
    endpoint = Endpoint.objects.filter(job=job, name=name).first() or Endpoint(job=job, name=name)
    defaults = {f.name: f.get_default() for f in Endpoint._meta.concrete_fields}
    for field_name in DEFINITION_FIELDS:
        setattr(endpoint, field_name, fields.get(field_name, defaults[field_name]))
    endpoint.archived_at = None
    endpoint.full_clean()
    endpoint.save()
    recompute_next_run(endpoint, now=now)
    return endpoint


def recompute_next_run(endpoint: Endpoint, *, now: Any) -> None:
    # Interim: scheduling.recompute_next_run replaces this once the engine lands it.
    plan = plan_next_run(now, EndpointSchedule.from_endpoint(endpoint))
    Endpoint.objects.filter(pk=endpoint.pk).update(
        next_run_at=plan.next_run_at, next_run_source=plan.source
    )


DEFINITION_FIELDS = (
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
