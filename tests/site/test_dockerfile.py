"""The Dockerfile, parsed (no Docker engine here): two stages, the build one installing
from the lock and the final one only copying what it built, run as a user that is not
root, and every compose healthcheck able to run in that image."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from tests.compose import REPO, load_compose


@dataclass
class Stage:
    base: str
    name: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def lines(self, keyword: str) -> list[str]:
        return [argument for word, argument in self.instructions if word == keyword]


def stages() -> list[Stage]:
    """The Dockerfile's stages, each with its instructions (continuation lines joined)."""
    text = re.sub(r"\\\n", " ", (REPO / "Dockerfile").read_text())
    found: list[Stage] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, argument = line.partition(" ")
        if word.upper() == "FROM":
            base, _, name = argument.partition(" AS ")
            found.append(Stage(base.strip(), name.strip()))
        else:
            found[-1].instructions.append((word.upper(), " ".join(argument.split())))
    return found


def test_the_image_is_built_in_one_stage_and_runs_from_another() -> None:
    build, runtime = stages()
    assert (build.name, runtime.name) == ("build", "runtime")
    assert build.base == runtime.base == "python:3.11-slim"
    runs = " && ".join(build.lines("RUN"))
    assert "uv sync --frozen --no-dev --no-install-project" in runs
    assert "uv sync --frozen --no-dev" in runs.replace("--no-install-project", "")
    # The final stage installs nothing: it copies the environment and the code built.
    assert not any(re.search(r"\b(pip|uv|apt-get)\b", run) for run in runtime.lines("RUN"))
    copies = runtime.lines("COPY")
    assert "--from=build /opt/venv /opt/venv" in copies
    assert "--from=build /app /app" in copies


def test_the_final_stage_runs_as_a_user_that_is_not_root() -> None:
    runtime = stages()[-1]
    users = runtime.lines("USER")
    assert users and users[-1] not in {"root", "0", "0:0"}
    assert any(
        "useradd --system --uid 10001" in run and users[-1] in run for run in runtime.lines("RUN")
    )
    words = [word for word, _ in runtime.instructions]
    # Nothing after USER runs as root again, and the command is the web server's.
    assert "RUN" not in words[words.index("USER") :]
    cmd = json.loads(runtime.lines("CMD")[-1])
    assert cmd[0] == "gunicorn"


def test_the_console_script_and_the_healthchecks_need_only_what_the_image_has() -> None:
    # The healthchecks run python, manage.py or celery, all in /opt/venv/bin of the image.
    for name, service in load_compose()["services"].items():
        test = service.get("healthcheck", {}).get("test")
        if test is None or name in ("postgres", "redis"):
            continue
        program = test[1] if test[0] == "CMD" else test[1].split()[0]
        assert program in {"python", "celery"}, (name, test)
