"""docker-compose.yml as the tests read it: the file, compose's own interpolation of
${VAR}, ${VAR:-default}, ${VAR:?error} and $$, and a service's command line
(tests/site/test_deploy.py checks the files, tests/processes/test_compose_processes.py
runs the lines)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]


COMPOSE = "docker-compose.yml"


DEMO = "docker-compose.demo.yml"


APP_SERVICES = (
    "migrate",
    "web",
    "beat",
    "worker-tick",
    "worker-execute",
    "worker-planner",
    "worker-notify",
    "mcp",
)


LONG_RUNNING = APP_SERVICES[1:]


VARIABLE = re.compile(r"\$\$|\$\{(?P<name>[A-Z0-9_]+)(?:(?P<op>:-|:\?)(?P<arg>[^}]*))?\}")


def load_compose(name: str = COMPOSE) -> dict[str, Any]:
    return yaml.safe_load((REPO / name).read_text())


def interpolate(value: str, env: Mapping[str, str]) -> str:
    """Compose's interpolation: ${VAR}, ${VAR:-default}, ${VAR:?error} and $$."""

    def substitute(match: re.Match[str]) -> str:
        if match[0] == "$$":
            return "$"
        name, op, arg = match["name"], match["op"], match["arg"]
        if env.get(name):
            return env[name]
        if op == ":?":
            raise ValueError(f"{name} is required: {arg}")
        return arg if op == ":-" else ""

    return VARIABLE.sub(substitute, value)


def service_command(service: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    command = service["command"]
    assert isinstance(command, list), "commands are lists, so no shell parses them"
    return [interpolate(str(part), env) for part in command]
