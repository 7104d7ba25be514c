"""``manage.py demo``: an admin user, a demo tenant and a job of endpoints to watch adapt."""

from __future__ import annotations

import secrets
import socket
from typing import Any
from urllib.parse import urlsplit

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from django.utils import timezone

from endpoints.audit import Actor
from endpoints.config_io.documents import ConfigError
from endpoints.config_io.importing import import_document
from endpoints.engine.guard import AddressGuard, BlockedAddressError, NetworkPolicy
from endpoints.models import Endpoint, Job, JobStatus
from endpoints.operations import resume_job, run_job_now

DEMO_TENANT = "Demo"
DEMO_JOB = "demo"
ADMIN_USERNAME = "admin"
INBOX_VARIABLE = "CRONICORN_SECRET_DEMO_CHANNEL_INBOX"  # the name export_endpoints gives it


def demo_document(base_url: str) -> dict[str, Any]:
    """The demo as a configuration document (the format of import_endpoints)."""
    root = base_url.rstrip("/")
    endpoints = [
        {
            "name": "queue-depth",
            "url": f"{root}/demo/queue/",
            "baseline_interval": "30s",
            "min_interval": "10s",
            "max_interval": "5m",
            "description": "Order queue depth. Check often while it is deep or rising; "
            "relax when it has drained.",
        },
        {
            "name": "health",
            "url": f"{root}/demo/health/",
            "baseline_interval": "1m",
            "min_interval": "15s",
            "max_interval": "10m",
            "description": "Service health and error rate. Watch closely when degraded or "
            "critical.",
        },
        {
            "name": "thresholds",
            "url": f"{root}/demo/thresholds/",
            "baseline_cron": "*/2 * * * *",
            "timezone": "Europe/Berlin",
            "min_interval": "20s",
            "description": "A gauge with warning and critical thresholds; sample more often "
            "above the warning level.",
        },
        {
            "name": "ingest",
            "url": f"{root}/demo/ingest/",
            "method": "POST",
            "body": {"batch": "demo", "source": "cronicorn"},
            "headers": {"Authorization": "Bearer demo-token"},
            "secret_headers": ["Authorization"],
            "baseline_interval": "2m",
            "description": "Pushes a batch; the answer reports the queue depth it caused.",
        },
        {
            "name": "rate-limited",
            "url": f"{root}/demo/rate-limited/",
            "baseline_interval": "30s",
            "max_interval": "5m",
            "description": "A partner API that answers 429 with Retry-After for one minute in "
            "five; back off until the time it names.",
        },
    ]
    job = {
        "name": DEMO_JOB,
        "description": "Demo services on this web app's /demo/ targets, whose answers change "
        "over a ten-minute cycle.",
        "endpoints": endpoints,
    }
    # Alerts go to the demo's own inbox, so `test_channel Demo/inbox` and the alert pages
    # have something to show without any outside service.
    inbox = {"name": "inbox", "kind": "webhook", "target": f"${{{INBOX_VARIABLE}}}"}
    tenant = {
        "name": DEMO_TENANT,
        "members": [ADMIN_USERNAME],
        "channels": [inbox],
        "jobs": [job],
    }
    return {"version": 1, "tenants": [tenant]}


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
        base_url = options["base_url"].rstrip("/")
        now = timezone.now()
        try:
            with transaction.atomic():
                ensure_admin(password)
                environ = {INBOX_VARIABLE: f"{base_url}/demo/inbox/"}
                import_document(
                    demo_document(base_url),
                    environ=environ,
                    now=now,
                    prune=True,
                    actor=Actor.command(),
                )
                job = Job.objects.get(tenant__name=DEMO_TENANT, name=DEMO_JOB)
                if job.status != JobStatus.ACTIVE:
                    resume_job(job, now=now, actor=Actor.command())
                # Each endpoint runs once as soon as the scheduler is up, so the dashboard
                # shows answers at once rather than after a first interval of silence.
                run_job_now(job, now=now, actor=Actor.command())
        except ConfigError as exc:
            raise CommandError(
                f"--base-url {base_url!r} does not make valid endpoints:\n  "
                + "\n  ".join(exc.problems)
            ) from None
        self.stdout.write(
            f"Demo ready: tenant {DEMO_TENANT!r}, job {DEMO_JOB!r}; each endpoint runs once "
            "as soon as the scheduler is up, then on its schedule."
        )
        for endpoint in Endpoint.objects.live().filter(job=job):
            self.stdout.write(f"  {endpoint.ref:<22} {endpoint.url}")
        self.stdout.write(f"Sign in at {base_url}/admin/ as")
        self.stdout.write(f"  user: {ADMIN_USERNAME}  password: {password}")
        if refusal := guard_refuses(base_url):
            self.stderr.write(f"Note: the scheduler will refuse the demo's endpoints: {refusal}.")


def guard_refuses(base_url: str) -> str | None:
    """Why the outbound guard, as configured, would refuse ``base_url``'s host; None if
    it would not (the demo's targets run on this machine: allowed or allowlisted)."""
    url = urlsplit(base_url)
    host = url.hostname or ""
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        addresses = {str(info[4][0]) for info in socket.getaddrinfo(host, None)}
        AddressGuard(NetworkPolicy.from_settings()).check(host, addresses, port)
    except BlockedAddressError as exc:
        return str(exc)
    except OSError:
        return None  # a name that does not resolve here: the runs will say so
    return None


def ensure_admin(password: str) -> Any:
    user_model = get_user_model()
    user, _ = user_model.objects.get_or_create(username=ADMIN_USERNAME)
    user.is_staff = True
    user.is_superuser = True
    user.is_active = True
    user.set_password(password)
    user.save(update_fields=["is_staff", "is_superuser", "is_active", "password"])
    return user
