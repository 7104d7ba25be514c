"""The README as a person follows it: its code blocks, read and run.

A block is a fenced code block. How the README test treats it is said by the HTML
comment on the line before its fence (a person reading the rendered page sees nothing):

- ``sh`` and ``console`` blocks run by default, in order, in one shell session;
  a ``console`` block is commands after ``$ `` (``\\`` continues a line) each followed by
  what it prints: every line shown must come out, in that order (other lines may come
  between), ``…`` standing for any text.
- ``<!-- readme: start -->``: the command that starts the system (run in the background
  first, waited for until the admin answers).
- ``<!-- readme: file NAME -->``: the block is a file the person saves as NAME.
- ``<!-- readme: mcp-config -->``: a JSON config an MCP client launches or connects to.
- ``<!-- readme: not run: WHY -->``: a block for another machine or another tool.

``json`` and ``yaml`` blocks must say which (a config nobody tries is how they broke).
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
MARKER = re.compile(r"^\s*<!--\s*readme:\s*(?P<kind>[a-z-]+)(?::?\s*(?P<arg>.*?))?\s*-->\s*$")
RUN_BY_DEFAULT = {"sh", "console"}
MUST_BE_MARKED = {"json", "yaml"}
KINDS = {"start", "file", "mcp-config", "not"}


@dataclass(frozen=True)
class Block:
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    kind: str  # run, start, file, mcp-config, not, or "" for prose-only blocks
    arg: str = ""

    @property
    def where(self) -> str:
        return f"README.md line {self.line} ({self.lang or 'text'} block)"


def blocks(readme: str) -> list[Block]:
    """Every fenced block of ``readme`` with how it is to be treated."""
    lines = readme.splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        indent, lang = opening.groups()
        end = index + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        body = "\n".join(line.removeprefix(indent) for line in lines[index + 1 : end])
        kind, arg = _marker(lines, index)
        if not kind:
            kind = "run" if lang in RUN_BY_DEFAULT else ""
        found.append(Block(index + 1, lang, body + "\n", kind, arg))
        index = end + 1
    return found


def _marker(lines: list[str], fence: int) -> tuple[str, str]:
    before = fence - 1
    while before >= 0 and not lines[before].strip():
        before -= 1
    match = MARKER.match(lines[before]) if before >= 0 else None
    if match is None:
        return "", ""
    return match["kind"], match["arg"] or ""


def saved_file(readme: str, name: str) -> Block:
    """The block the README asks a person to save as ``name`` (``<!-- readme: file NAME
    -->``): one, or the README lost it."""
    [block] = [b for b in blocks(readme) if (b.kind, b.arg) == ("file", name)]
    return block


def recipe(readme: str, name: str, function: str) -> Any:
    """``function`` as the README's file ``name`` defines it, run as written there."""
    block = saved_file(readme, name)
    namespace: dict[str, Any] = {}
    exec(compile(block.text, block.where, "exec"), namespace)
    return namespace[function]


def unmarked(found: list[Block]) -> list[str]:
    """Blocks the test would not know what to do with, said as problems."""
    problems = []
    for block in found:
        if block.lang in MUST_BE_MARKED and not block.kind:
            problems.append(f"{block.where}: mark it (file, mcp-config or not run: why)")
        if block.kind not in KINDS | {"run", ""}:
            problems.append(f"{block.where}: unknown marker 'readme: {block.kind}'")
    return problems


@dataclass(frozen=True)
class Command:
    line: int
    text: str
    expected: tuple[str, ...] = ()


def console_commands(block: Block) -> list[Command]:
    """A console block's ``$ `` commands, each with the lines it is shown printing."""
    commands: list[Command] = []
    lines = block.text.splitlines()
    index = 0
    while index < len(lines):
        if not lines[index].startswith("$ "):
            index += 1
            continue
        line = block.line + 1 + index
        text = lines[index][2:]
        while text.endswith("\\") and index + 1 < len(lines):
            index += 1
            text = text + "\n" + lines[index]
        index += 1
        shown = []
        while index < len(lines) and not lines[index].startswith("$ "):
            if lines[index].strip():
                shown.append(lines[index])
            index += 1
        commands.append(Command(line, text, tuple(shown)))
    return commands


def missing_lines(expected: tuple[str, ...], output: str) -> list[str]:
    """The shown lines that did not come out, in order (``…`` is any text; runs of
    spaces are one space, as tables are aligned by the width of what they hold)."""
    actual = [" ".join(line.split()) for line in output.splitlines()]
    position = 0
    missing = []
    for wanted in expected:
        pattern = re.compile(
            ".*".join(re.escape(" ".join(part.split())) for part in wanted.split("…"))
        )
        for offset, line in enumerate(actual[position:]):
            if pattern.fullmatch(line):
                position += offset + 1
                break
        else:
            missing.append(wanted)
    return missing


@dataclass
class Shell:
    """One bash session, as a person's second terminal: the environment it is given and
    nothing more, the copy as working directory; what a command exports or starts in the
    background stays for the next. Each command is sourced from a file, with standard
    input from /dev/null, so nothing it runs can read the commands that follow."""

    cwd: Path
    env: dict[str, str]
    process: subprocess.Popen[str] = field(init=False)
    lines: queue.Queue[str | None] = field(init=False, default_factory=queue.Queue)
    count: int = 0

    def __post_init__(self) -> None:
        self.process = subprocess.Popen(
            ["bash", "--noprofile", "--norc"],
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def run(self, text: str, *, strict: bool = False, timeout: float = 180) -> tuple[int, str]:
        """Run ``text`` in the session; its exit status and what it printed. ``strict``:
        a failing command inside it fails it (``set -e``), as a script would."""
        self.count += 1
        script = self.cwd / f".readme-command-{self.count}.sh"
        body = f"set -eo pipefail\n{text}\nset +eo pipefail\n" if strict else text
        script.write_text(body)
        marker = f"__readme_done_{self.count}__"
        assert self.process.stdin is not None
        # A strict block that fails ends the session (set -e), which fails the test.
        # Its status is kept before the newline that ends its last line of output.
        self.process.stdin.write(
            f"source {script} </dev/null; __status=$?; echo; echo {marker} $__status\n"
        )
        self.process.stdin.flush()
        return self._until(marker, timeout)

    def _until(self, marker: str, timeout: float) -> tuple[int, str]:
        deadline = time.monotonic() + timeout
        output: list[str] = []
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return -1, "".join(output) + f"\n[no end after {timeout:.0f} s]"
            if line is None:
                return -2, "".join(output) + "\n[the shell ended]"
            if line.startswith(marker):
                return int(line.split()[-1]), "".join(output)
            output.append(line)

    def value(self, name: str) -> str:
        status, output = self.run(f'printf "%s\\n" "${{{name}}}"')
        assert status == 0, output
        return output.strip().splitlines()[-1] if output.strip() else ""

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, 15)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, 9)
            self.process.wait()
