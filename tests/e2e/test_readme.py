"""The README, followed as a person would (docs/DESIGN.md, "The README is part of the
product"): a fresh copy of the checkout, ``scripts/start`` as written, then every command
and config the README shows, from a second terminal whose environment holds HOME and
PATH only. A README edit that breaks a command fails here, naming its line.

What the test changes, and only that: the ports. It gives the web app and the MCP server
free ports instead of 8000 and 8765 (``PORT`` for scripts/start, the same numbers
replaced in the blocks), so it runs beside a developer's own scripts/start. In the MCP
client configs it puts the copy's path for ``/path/to/cronicorn`` and the session's
``$CRONICORN_API_KEY`` for ``cc_…``: the two things the README tells a person to fill in.
How each block is treated: tests/e2e/readme.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from tests.e2e.readme import Block, Shell, blocks, console_commands, missing_lines, unmarked
from tests.http_targets import free_port

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PATH_PLACEHOLDER = "/path/to/cronicorn"
KEY_PLACEHOLDER = "cc_…"


def test_every_config_block_of_the_readme_says_how_it_is_used() -> None:
    assert unmarked(blocks(README.read_text())) == []


def test_a_console_block_is_matched_line_by_line_in_order() -> None:
    block = Block(10, "console", "$ echo a \\\n  b\nA …\n$ true\n", "run")
    first, second = console_commands(block)
    assert (first.line, first.text, first.expected) == (11, "echo a \\\n  b", ("A …",))
    assert (second.line, second.expected) == (14, ())
    assert missing_lines(("x  …", "z"), "x   1\ny\nz\n") == []
    assert missing_lines(("z", "x …"), "x 1\nz\n") == ["x …"]


def test_the_shell_reports_each_command_s_status_and_a_strict_block_stops_at_a_failure(
    tmp_path: Path,
) -> None:
    shell = Shell(tmp_path, clean_environment())
    try:
        assert shell.run("echo one; false") == (1, "one\n\n")
        assert shell.run("echo two") == (0, "two\n\n")
        status, output = shell.run("false\necho three", strict=True)
        assert status != 0 and "three" not in output
    finally:
        shell.close()


def clean_environment(**extra: str) -> dict[str, str]:
    """What `env -i HOME=$HOME PATH=$PATH bash` leaves: no variable of the test run."""
    path = os.pathsep.join(
        part for part in os.environ["PATH"].split(os.pathsep) if "/.venv/" not in part + "/"
    )
    return {"HOME": os.environ["HOME"], "PATH": path, **extra}


def fresh_copy(destination: Path) -> Path:
    """The checkout as a clone of it would be, with the work not yet committed: the
    files git tracks or would track, none it ignores (no .venv, database, .env.local)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, (entry.decode() for entry in listed)):
        source = ROOT / name
        if source.is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)
    return destination


@pytest.fixture
def ports() -> dict[str, str]:
    return {"127.0.0.1:8000": f"127.0.0.1:{free_port()}", "8765": str(free_port())}


def substituted(text: str, ports: dict[str, str]) -> str:
    for written, used in ports.items():
        text = text.replace(written, used)
    return text


@pytest.fixture
def started(tmp_path: Path, ports: dict[str, str]) -> Iterator[Path]:
    """A fresh copy with the README's start command running in it, the admin answering."""
    copy = fresh_copy(tmp_path / "cronicorn")
    (start,) = [block for block in blocks(README.read_text()) if block.kind == "start"]
    web = ports["127.0.0.1:8000"]
    log = tmp_path / "start.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            ["bash", "-c", start.text],
            cwd=copy,
            env=clean_environment(PORT=web.rsplit(":", 1)[1]),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for(f"http://{web}/admin/login/", process, log, what=start.where)
        yield copy
    finally:
        os.killpg(process.pid, 15)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait()


def wait_for(url: str, process: subprocess.Popen[bytes], log: Path, *, what: str) -> None:
    deadline = time.monotonic() + 420  # a first install of the locked dependencies
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"{what} ended with {process.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    pytest.fail(f"{what}: {url} did not answer in time:\n{log.read_text()}")


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_every_command_and_config_of_the_readme_works_from_a_second_terminal(
    started: Path, ports: dict[str, str], tmp_path: Path
) -> None:
    shell = Shell(started, clean_environment())
    problems: list[str] = []
    try:
        for block in blocks(README.read_text()):
            problems += follow(block, shell, started, ports, tmp_path)
    finally:
        shell.close()
    assert not problems, "\n\n".join(problems)


def follow(
    block: Block, shell: Shell, copy: Path, ports: dict[str, str], elsewhere: Path
) -> list[str]:
    """Do what the README asks with ``block``; what went wrong, said with its line."""
    text = substituted(block.text, ports)
    if block.kind == "file":
        (copy / block.arg).write_text(text)
        return []
    if block.kind == "mcp-config":
        key = shell.value("CRONICORN_API_KEY")
        config = text.replace(PATH_PLACEHOLDER, str(copy)).replace(KEY_PLACEHOLDER, key)
        return [f"{block.where}: {problem}" for problem in mcp_problems(config, elsewhere)]
    if block.kind != "run":
        return []
    if block.lang == "sh":
        status, output = shell.run(text, strict=True)
        return [] if status == 0 else [f"{block.where} exited {status}:\n{output}"]
    problems = []
    for command in console_commands(Block(block.line, block.lang, text, block.kind)):
        status, output = shell.run(command.text)
        said = f"README.md line {command.line}: $ {command.text}"
        if status != 0 or "Traceback" in output:
            problems.append(f"{said}\nexited {status}:\n{output}")
        elif missing := missing_lines(command.expected, output):
            shown = "\n".join(missing)
            problems.append(f"{said}\ndid not print:\n{shown}\nit printed:\n{output}")
    return problems


def mcp_problems(config: str, elsewhere: Path) -> list[str]:
    """Launch or connect to each server of an MCP client config exactly as a desktop
    client does (its command, args and env; no working directory of ours), list the
    tools and call one."""
    problems = []
    for name, server in json.loads(config)["mcpServers"].items():
        try:
            tools, jobs = asyncio.run(list_tools_and_jobs(server, elsewhere))
        except Exception as exc:
            problems.append(f"server {name!r}: {type(exc).__name__}: {exc}")
            continue
        if "list_jobs" not in tools or "demo" not in jobs:
            problems.append(f"server {name!r}: tools {sorted(tools)[:5]}…, list_jobs: {jobs}")
    return problems


async def list_tools_and_jobs(server: dict[str, Any], elsewhere: Path) -> tuple[set[str], str]:
    if server.get("type") == "http":
        client = await connected_http(server)
    else:
        params = StdioServerParameters(
            command=server["command"],
            args=server.get("args", []),
            env=server.get("env"),
            cwd=elsewhere,
        )
        client = Client(params, read_timeout_seconds=60)
    async with client:
        tools = {tool.name for tool in (await client.list_tools()).tools}
        result = await client.call_tool("list_jobs", {})
        return tools, " ".join(getattr(part, "text", "") for part in result.content)


async def connected_http(server: dict[str, Any]) -> Client:
    """The HTTP server was started in the background by a README block: wait until it
    listens, as a person would glance at its log."""
    url = server["url"]
    for _ in range(120):
        try:
            httpx.get(url.rsplit("/mcp", 1)[0] + "/healthz", timeout=1)
            break
        except httpx.TransportError:
            await asyncio.sleep(0.25)
    http = httpx2.AsyncClient(headers=server.get("headers", {}))
    return Client(streamable_http_client(url, http_client=http), read_timeout_seconds=60)
