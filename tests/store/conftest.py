"""Fixtures of the bundle store tests: the demo's bundles, and a real PostgreSQL from Debian
started on loopback for the session (``scripts/test`` installs it when missing)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

REPO = Path(__file__).resolve().parents[2]
# serve() and wait_for() of the processor tests (a subprocess serve, bounded waits)
sys.path.insert(0, str(REPO / "tests" / "processor"))
from processor_testkit import SPAWNED  # noqa: E402

#: Turns of the demo conversation the store tests read (the demo compacts every third turn).
DEMO_TURNS = 9


def run_cli(*args: str, timeout: float = 120, check: bool = True,
            stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "otel_agent_context", *args], cwd=REPO,
                            capture_output=True, text=stdin is None, timeout=timeout,
                            input=stdin)
    if check and result.returncode != 0:
        raise AssertionError(f"{args} exited {result.returncode}: {result.stderr}")
    return result


def read_jsonl(out_dir: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for path in sorted(out_dir.glob("bundles-*.jsonl"))
            for line in path.read_bytes().splitlines() if line.strip()]


@pytest.fixture(autouse=True)
def _no_leftover_serve() -> Iterator[None]:
    """A test that fails half-way must not leave a ``serve`` process running."""
    yield
    while SPAWNED:
        process = SPAWNED.pop()
        if process.poll() is None:
            process.kill()
        process.wait(10)


@pytest.fixture(scope="session")
def demo_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``otel-agent-context demo`` run once: its output directory (JSON Lines and context.db)."""
    out = tmp_path_factory.mktemp("demo") / "out"
    run_cli("demo", "--out", str(out), "--turns", str(DEMO_TURNS), "--seed", "0")
    assert (out / "context.db").is_file()
    return out


@pytest.fixture(scope="session")
def demo_bundles(demo_out: Path) -> list[dict[str, Any]]:
    bundles = read_jsonl(demo_out)
    assert len(bundles) == DEMO_TURNS
    return bundles


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pg_bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(p.split("/")[4]))
    if not found:
        pytest.fail("PostgreSQL is not installed: apt-get install postgresql (scripts/test "
                    "does this on a fresh machine)")
    return Path(found[-1]).parent


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[dict[str, Any]]:
    """A throwaway PostgreSQL cluster on a free loopback port (trust auth, fsync off)."""
    bin_dir = _pg_bin()
    root = os.geteuid() == 0
    base = Path(tempfile.mkdtemp(prefix="otel-ac-pg-"))
    data, sockets = base / "data", base / "sock"
    sockets.mkdir()
    prefix: list[str] = []
    if root:  # PostgreSQL refuses to run as root: the Debian package's postgres user runs it
        user = pwd.getpwnam("postgres")
        for path in (base, sockets):
            os.chown(path, user.pw_uid, user.pw_gid)
        prefix = ["runuser", "-u", "postgres", "--"]
    port = _free_port()
    subprocess.run([*prefix, str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres",
                    "--auth=trust", "-E", "UTF8", "--no-sync"], check=True,
                   capture_output=True, timeout=120)
    log = base / "server.log"
    started = subprocess.run(
        [*prefix, str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t", "60",
         "-o", f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off "
               "-c full_page_writes=off -c synchronous_commit=off", "start"],
        capture_output=True, timeout=90)
    if started.returncode != 0:
        raise AssertionError(f"PostgreSQL did not start: {started.stderr!r} "
                             f"{log.read_text(errors='replace') if log.exists() else ''}")
    try:
        yield {"port": port, "bin": bin_dir, "prefix": prefix,
               "admin": f"postgresql://postgres@127.0.0.1:{port}/postgres"}
    finally:
        subprocess.run([*prefix, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate",
                        "-w", "stop"], capture_output=True, timeout=60)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres_server: dict[str, Any]) -> Iterator[str]:
    """A new empty database per test."""
    import psycopg

    name = f"t{time.time_ns()}"
    with psycopg.connect(postgres_server["admin"], autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield f"postgresql://postgres@127.0.0.1:{postgres_server['port']}/{name}"
    with psycopg.connect(postgres_server["admin"], autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The store's URL: a SQLite file under ``out``, then a new PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'out' / 'context.db'}"
    url: str = request.getfixturevalue("postgres_url")
    return url
