"""A Redis server and a PostgreSQL cluster of the fault suite's own, on free ports.

The machine's shared services are never stopped or restarted: every fault hits these.
Both are started and stopped by the harness and restart on the same port, so the fleet's
clients see the same address come back, as after a failover or a service restart.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import redis

from tests.http_targets import free_port

# initdb and postgres refuse to run as root: as root, the cluster belongs to the Debian
# package's `postgres` user (runuser); as anyone else, to that user.
PG_USER = "postgres"
AS_ROOT = os.geteuid() == 0


def wait_for(condition: Callable[[], bool], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not happen within {timeout} s")


class RedisServer:
    """``redis-server --save "" --appendonly no`` on a free port: a restart loses everything,
    as a broker without persistence does."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=5, socket_connect_timeout=2)

    def start(self) -> None:
        args = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1"]
        args += ["--save", "", "--appendonly", "no", "--dir", str(self.workdir)]
        with (self.workdir / "redis.log").open("ab") as log:
            self._process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        wait_for(self.answers, timeout=10, what=f"redis-server on port {self.port} answering")

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            self._process.wait(timeout=10)
        self._process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def drop_client_connections(self) -> int:
        """What a failover, a proxy restart or a network blip does to every client."""
        return int(self.client().client_kill_filter(_type="normal", skipme=True))

    def answers(self) -> bool:
        try:
            return bool(self.client().ping())
        except redis.RedisError:
            return False


class PostgresCluster:
    """A throwaway cluster (initdb, ``fsync=off``) run by ``pg_ctl`` as the postgres user."""

    def __init__(self) -> None:
        self.port = free_port()
        self.bin = Path(sorted(glob.glob("/usr/lib/postgresql/*/bin"))[-1])
        # The postgres user must reach its data directory, so not under pytest's private
        # (0700, root's) temporary directories: a directory of its own in /tmp.
        self.home = Path(tempfile.mkdtemp(prefix="cronicorn-faults-pg-"))
        if AS_ROOT:
            shutil.chown(self.home, PG_USER, PG_USER)
        self.data = self.home / "data"
        self.log = self.home / "postgres.log"

    def url(self, database: str) -> str:
        return f"postgres://{PG_USER}@127.0.0.1:{self.port}/{database}"

    def connect(self, database: str = "postgres") -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(self.url(database), autocommit=True, connect_timeout=5)

    def init(self) -> None:
        self._pg("initdb", "-D", str(self.data), "-U", PG_USER, "--auth=trust", "-E", "UTF8")
        settings = {
            "port": str(self.port),
            "listen_addresses": "'127.0.0.1'",
            "unix_socket_directories": f"'{self.home}'",
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "max_connections": "300",
        }
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.writelines(f"{name} = {value}\n" for name, value in settings.items())

    def start(self) -> None:
        self._pg("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "start")

    def stop(self) -> None:
        self._pg("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def restart(self) -> None:
        self._pg("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-m", "fast", "-w", "restart")

    def destroy(self) -> None:
        """Stop the cluster if it runs and delete its files."""
        if self.running():
            self.stop()
        shutil.rmtree(self.home, ignore_errors=True)

    def running(self) -> bool:
        return self._run("pg_ctl", "-D", str(self.data), "status").returncode == 0

    def _pg(self, program: str, *args: str) -> None:
        done = self._run(program, *args)
        if done.returncode != 0:
            output = (done.stdout + done.stderr).decode(errors="replace")[-2000:]
            raise RuntimeError(f"{program} {' '.join(args)} failed:\n{output}")

    def _run(self, program: str, *args: str) -> subprocess.CompletedProcess[bytes]:
        command = [str(self.bin / program), *args]
        if AS_ROOT:
            command = ["runuser", "-u", PG_USER, "--", *command]
        return subprocess.run(command, capture_output=True, check=False, cwd="/", env=_pg_env())


def _pg_env() -> dict[str, str]:
    # PG* variables of the caller (a DATABASE_URL's PGPORT, say) must not redirect pg_ctl.
    return {k: v for k, v in os.environ.items() if not k.startswith("PG")}
