"""/healthz, /readyz and /metrics as an operator's probe and Prometheus see them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder
from django.test import Client
from django.utils import timezone

from endpoints.models import Heartbeat

TOKEN = "metrics-token-for-tests"


@pytest.fixture
def client() -> Client:
    return Client()


@pytest.fixture
def fresh_tick(db: None) -> None:
    Heartbeat.beat("tick", now=timezone.now())


def test_healthz_answers_ok_without_touching_the_database(client: Client) -> None:
    # No db fixture: any query would raise "Database access not allowed".
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_is_200_when_database_migrations_broker_and_tick_are_fine(
    client: Client, fresh_tick: None
) -> None:
    response = client.get("/readyz")
    body = response.json()
    assert response.status_code == 200, body
    assert body["status"] == "ready"
    assert set(body["checks"]) == {"database", "migrations", "tick", "fleet", "broker"}
    assert all(check["ok"] for check in body["checks"].values())
    assert body["checks"]["tick"]["age_seconds"] < 30


def test_readyz_is_503_before_any_tick_and_says_what_to_start(client: Client, db: None) -> None:
    response = client.get("/readyz")
    assert response.status_code == 503
    tick = response.json()["checks"]["tick"]
    assert tick["ok"] is False
    assert "celery beat" in tick["error"]


def test_readyz_is_503_when_the_last_tick_is_older_than_the_threshold(
    client: Client, db: None, settings
) -> None:
    settings.CRONICORN_READY_MAX_TICK_AGE_SECONDS = 5
    Heartbeat.beat("tick", now=timezone.now() - timedelta(seconds=6))
    response = client.get("/readyz")
    assert response.status_code == 503
    tick = response.json()["checks"]["tick"]
    assert tick["ok"] is False
    assert tick["max_age_seconds"] == 5
    assert tick["age_seconds"] >= 6


def test_readyz_is_503_when_the_broker_is_unreachable_and_hides_its_password(
    client: Client, fresh_tick: None, settings
) -> None:
    settings.CELERY_BROKER_URL = "redis://:hunter2-broker-pass@127.0.0.1:1/0"
    response = client.get("/readyz")
    assert response.status_code == 503
    broker = response.json()["checks"]["broker"]
    assert broker["ok"] is False
    assert "CRONICORN_BROKER_REQUIRED=false" in broker["error"]
    assert "hunter2-broker-pass" not in response.content.decode()


def test_readyz_skips_the_broker_when_the_deployment_runs_without_one(
    client: Client, fresh_tick: None, settings
) -> None:
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"
    settings.CRONICORN_BROKER_REQUIRED = False
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json()["checks"]["broker"]["skipped"]


def test_readyz_is_503_and_names_a_migration_that_is_not_applied(
    client: Client, fresh_tick: None
) -> None:
    recorder = MigrationRecorder(connection)
    app, latest = max(
        n for n in MigrationLoader(connection).graph.leaf_nodes() if n[0] == "endpoints"
    )
    recorder.record_unapplied(app, latest)
    try:
        response = client.get("/readyz")
    finally:
        recorder.record_applied(app, latest)
    assert response.status_code == 503
    migrations = response.json()["checks"]["migrations"]
    assert migrations["ok"] is False
    assert f"endpoints.{latest}" in migrations["pending"]


def test_readyz_is_503_when_the_database_is_unreachable(client: Client, django_db_blocker) -> None:
    # The default connection pointed at a closed port for one request.
    with django_db_blocker.unblock():
        connection.close()
        original = connection.settings_dict.copy()
        connection.settings_dict.update(HOST="127.0.0.1", PORT="1")
        try:
            response = client.get("/readyz")
        finally:
            connection.close()
            connection.settings_dict.update(original)
    assert response.status_code == 503
    checks = response.json()["checks"]
    assert checks["database"]["ok"] is False
    assert checks["tick"]["ok"] is False


def test_metrics_refuse_a_missing_or_wrong_token(client: Client, db: None, settings) -> None:
    settings.CRONICORN_METRICS_TOKEN = TOKEN
    assert client.get("/metrics").status_code == 401
    wrong = client.get("/metrics", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    assert wrong["WWW-Authenticate"].startswith("Bearer")


def test_metrics_answer_prometheus_text_to_the_right_token(
    client: Client, db: None, settings
) -> None:
    settings.CRONICORN_METRICS_TOKEN = TOKEN
    response = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    assert "cronicorn_runs_in_flight 0.0" in response.content.decode()


def test_metrics_without_a_token_are_refused_in_production_and_open_in_debug(
    client: Client, db: None, settings
) -> None:
    settings.CRONICORN_METRICS_TOKEN = ""
    settings.DEBUG = False
    refused = client.get("/metrics")
    assert refused.status_code == 403
    assert "CRONICORN_METRICS_TOKEN" in refused.content.decode()
    settings.DEBUG = True
    assert client.get("/metrics").status_code == 200
