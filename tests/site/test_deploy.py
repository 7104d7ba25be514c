"""The deployment files say what the project can really run.

docker-compose.yml (and the demo overlay) is parsed, not run: no Docker engine here. Every
service's command must name a real Celery queue, management command or module; every
queue must have a worker; .env.example must cover every setting; the image must install
everything at build time. ``tests/processes/test_compose_processes.py`` then starts these
same command lines as processes.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping

import pytest
from django.conf import settings
from django.core.management import get_commands

from tests.compose import (
    COMPOSE,
    DEMO,
    LONG_RUNNING,
    REPO,
    VARIABLE,
    interpolate,
    load_compose,
    service_command,
)


def env_example() -> dict[str, str | None]:
    """Variables of .env.example: their value when set, None when only shown commented."""
    variables: dict[str, str | None] = {}
    for line in (REPO / ".env.example").read_text().splitlines():
        active = re.fullmatch(r"([A-Z][A-Z0-9_]*)=(.*)", line)
        shown = re.fullmatch(r"# ?([A-Z][A-Z0-9_]*)=.*", line)
        if active:
            variables[active[1]] = active[2]
        elif shown:
            variables.setdefault(shown[1], None)
    return variables


def settings_variables() -> set[str]:
    """Every environment variable settings.py reads (env_* helpers and os.environ)."""
    tree = ast.parse((REPO / "cronicorn_site" / "settings.py").read_text())
    names = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        first = node.args[0]
        if (
            (called.startswith("env_") or called in {"get", "getenv"})
            and isinstance(first, ast.Constant)
            and isinstance(first.value, str)
            and re.fullmatch(r"[A-Z][A-Z0-9_]+", first.value)
        ):
            names.add(first.value)
    return names


def filled_env() -> dict[str, str]:
    """.env.example's values with its required secrets filled in, as an operator would."""
    values = {name: value for name, value in env_example().items() if value is not None}
    values.update(
        DJANGO_SECRET_KEY="x" * 50,
        POSTGRES_PASSWORD="pw-for-tests",
        CRONICORN_METRICS_TOKEN="token-for-tests",
    )
    return values


def option(command: list[str], *flags: str) -> str:
    for flag in flags:
        if flag in command:
            return command[command.index(flag) + 1]
    raise AssertionError(f"{command} has none of {flags}")


def routed_queues() -> set[str]:
    return {route["queue"] for route in settings.CELERY_TASK_ROUTES.values()}


def check_celery(command: list[str]) -> None:
    app_module = option(command, "-A", "--app")
    module = importlib.import_module(app_module)
    assert module.celery_app.main == "cronicorn", f"-A {app_module} is not the project's app"
    subcommand = command[command.index(app_module) + 1]
    assert subcommand in {"worker", "beat"}, command
    if subcommand == "worker":
        queues = set(option(command, "-Q", "--queues").split(","))
        assert queues <= routed_queues(), f"{queues - routed_queues()} are not routed queues"


def check_gunicorn(command: list[str]) -> None:
    assert (REPO / option(command, "-c", "--config")).is_file()
    module_name, _, attribute = command[-1].partition(":")
    module = importlib.import_module(module_name)
    assert callable(getattr(module, attribute or "application")), command


def check_manage(command: list[str]) -> None:
    assert command[1] == "manage.py", command
    assert command[2] in get_commands(), f"{command[2]} is not a management command"


CHECKERS = {"celery": check_celery, "gunicorn": check_gunicorn, "python": check_manage}


def test_every_app_service_runs_a_real_queue_command_or_module_of_the_project() -> None:
    for file in (COMPOSE, DEMO):
        for name, service in load_compose(file)["services"].items():
            if "command" not in service or name == "redis":
                continue
            command = service_command(service, filled_env())
            assert command[0] in CHECKERS, f"{file}: {name} runs {command[0]}, unknown here"
            CHECKERS[command[0]](command)


def test_every_routed_queue_has_a_worker_and_the_execute_worker_uses_threads() -> None:
    services = load_compose()["services"]
    consumed = set()
    for service in services.values():
        command = service_command(service, filled_env()) if "command" in service else []
        if command[:1] == ["celery"] and "worker" in command:
            consumed |= set(option(command, "-Q").split(","))
    assert consumed == routed_queues()
    execute = service_command(services["worker-execute"], {"CRONICORN_EXECUTE_CONCURRENCY": "9"})
    assert option(execute, "-P", "--pool") == "threads"  # requests run on its event loop
    assert option(execute, "-c", "--concurrency") == "9"


def test_app_services_wait_for_migrations_and_the_broker_and_restart_unless_stopped() -> None:
    services = load_compose()["services"]
    assert services["migrate"]["restart"] == "no"
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in LONG_RUNNING:
        service = services[name]
        assert service["restart"] == "unless-stopped", name
        assert service["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        assert service["depends_on"]["redis"]["condition"] == "service_healthy"
        assert service["volumes"] == ["metrics:/app/var/metrics"], name
        assert service["environment"]["PROMETHEUS_MULTIPROC_DIR"] == "/app/var/metrics"


def test_postgres_redis_and_web_have_health_checks_and_redis_never_evicts() -> None:
    services = load_compose()["services"]
    for name in ("postgres", "redis", "web"):
        assert services[name]["healthcheck"]["test"][0] == "CMD", name
    assert "/healthz" in " ".join(services["web"]["healthcheck"]["test"])
    redis = service_command(services["redis"], {})
    assert option(redis, "--maxmemory-policy") == "noeviction"


def test_the_env_example_covers_every_setting_read_in_settings() -> None:
    missing = settings_variables() - set(env_example())
    assert not missing, f".env.example does not mention {sorted(missing)}"


def test_the_env_example_defines_every_variable_the_compose_files_use() -> None:
    used = set()
    for file in (COMPOSE, DEMO):
        used |= {m["name"] for m in VARIABLE.finditer((REPO / file).read_text()) if m["name"]}
    missing = used - set(env_example())
    assert not missing, f".env.example does not define {sorted(missing)}"


def test_the_env_example_leaves_the_secrets_empty_so_nothing_starts_with_a_placeholder() -> None:
    example = {name: value for name, value in env_example().items() if value is not None}
    for name in ("DJANGO_SECRET_KEY", "POSTGRES_PASSWORD", "CRONICORN_METRICS_TOKEN"):
        assert example[name] == "", name
    with pytest.raises(ValueError, match="POSTGRES_PASSWORD"):
        interpolate(
            load_compose()["services"]["postgres"]["environment"]["POSTGRES_PASSWORD"], example
        )
    result = _django_in_subprocess(example)
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY is not set" in result.stderr


def test_the_filled_env_example_starts_django_in_production_mode() -> None:
    env = filled_env()
    compose_environment = load_compose()["services"]["web"]["environment"]
    env.update({k: interpolate(str(v), env) for k, v in compose_environment.items()})
    del env["PROMETHEUS_MULTIPROC_DIR"]  # the container's path; nothing here needs it
    result = _django_in_subprocess(env)
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout)
    assert loaded == {
        "DEBUG": False,
        "SESSION_COOKIE_SECURE": True,
        "CSRF_COOKIE_SECURE": True,
        "CRONICORN_ALLOW_PRIVATE_ADDRESSES": False,
        "TIME_ZONE": "UTC",
        "healthcheck_host_allowed": True,
        "engine": "django.db.backends.postgresql",
        "broker": "redis://redis:6379/0",
    }


def _django_in_subprocess(env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    script = """
import json, django
django.setup()
from django.conf import settings as s
print(json.dumps({
    "DEBUG": s.DEBUG,
    "SESSION_COOKIE_SECURE": s.SESSION_COOKIE_SECURE,
    "CSRF_COOKIE_SECURE": s.CSRF_COOKIE_SECURE,
    "CRONICORN_ALLOW_PRIVATE_ADDRESSES": s.CRONICORN_ALLOW_PRIVATE_ADDRESSES,
    "TIME_ZONE": s.TIME_ZONE,
    "healthcheck_host_allowed": "127.0.0.1" in s.ALLOWED_HOSTS,
    "engine": s.DATABASES["default"]["ENGINE"],
    "broker": s.CELERY_BROKER_URL,
}))
"""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("CRONICORN_", "DJANGO_"))}
    base.pop("DATABASE_URL", None)
    base.pop("CELERY_BROKER_URL", None)
    base["DJANGO_SETTINGS_MODULE"] = "cronicorn_site.settings"
    return subprocess.run(
        [sys.executable, "-c", script],
        env={**base, **env},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_image_installs_from_the_lock_at_build_time_and_runs_unprivileged() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    assert dockerfile.startswith("#") and "\nFROM python:3.11-slim AS runtime\n" in dockerfile
    assert "uv sync --frozen --no-dev" in dockerfile
    assert "collectstatic" in dockerfile
    user = re.findall(r"^USER (\S+)$", dockerfile, re.MULTILINE)
    assert user and user[-1] not in {"root", "0"}
    ignored = (REPO / ".dockerignore").read_text().splitlines()
    for private in (".env", ".secret_key", ".venv", ".git", "db.sqlite3*"):
        assert private in ignored, f"{private} would be copied into the image"


def test_nothing_is_installed_or_downloaded_when_a_container_starts() -> None:
    cmd = re.search(r"^CMD (.+)$", (REPO / "Dockerfile").read_text(), re.MULTILINE)
    assert cmd is not None
    lines = [" ".join(json.loads(cmd[1]))]
    for file in (COMPOSE, DEMO):
        for service in load_compose(file)["services"].values():
            if "command" in service:
                lines.append(" ".join(service_command(service, filled_env())))
    for line in lines:
        assert not re.search(r"\b(pip|uv|curl|wget|apt-get|npm)\b", line), line


def test_the_demo_overlay_seeds_endpoints_on_the_web_service_and_lets_the_guard_call_it() -> None:
    demo = load_compose(DEMO)["services"]
    command = service_command(demo["demo"], filled_env())
    assert command == ["python", "manage.py", "demo", "--base-url", "http://web:8000"]
    env = filled_env()
    allowlist = interpolate(demo["worker-execute"]["environment"]["CRONICORN_SSRF_ALLOWLIST"], env)
    assert "web" in allowlist.split(",")
    hosts = interpolate(demo["web"]["environment"]["DJANGO_ALLOWED_HOSTS"], env).split(",")
    assert {"web", "127.0.0.1"} <= set(hosts)
