"""A real PostgreSQL for tests and the cluster game day: Debian's `postgresql` package, a fresh cluster in a
temporary directory, listening on 127.0.0.1 at a free port — started by its user, as the suite starts Prometheus.

`initdb` refuses to run as root; as root the cluster is made and run as the package's `postgres` user.
`run_postgres()` yields a handle whose `database()` creates a fresh database per test; the server is
stopped (fast shutdown) and its directory removed on exit, also when a test fails.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path

from observer_dev.promserver import free_port

USER = "observer"


def bindir() -> Path | None:
    """Where initdb and pg_ctl are: pg_config's bindir, Debian's /usr/lib/postgresql/N/bin, or PATH."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def available() -> bool:
    return bindir() is not None


@dataclass
class Postgres:
    """A running test cluster."""

    port: int
    root: Path
    _names: Iterator[int] = field(default_factory=count)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{database}"

    def database(self) -> str:
        """Create a fresh database; return its URL."""
        import psycopg

        name = f"t{next(self._names)}_{os.getpid()}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


def _as_owner(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@contextmanager
def run_postgres(port: int | None = None) -> Iterator[Postgres]:
    """Start a throwaway cluster (on `port`, default a free one); stop it and remove its files on exit."""
    bins = bindir()
    if bins is None:
        raise RuntimeError("PostgreSQL is not installed (Debian package postgresql); `make test` installs it")
    root = Path(tempfile.mkdtemp(prefix="observer-pg-"))
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        shutil.chown(sock, "postgres")
    port = port or free_port()
    log = root / "server.log"
    try:
        subprocess.run(_as_owner([str(bins / "initdb"), "-D", str(data), "-U", USER, "--auth=trust", "-E", "UTF8",
                                  "--no-sync", "--no-instructions"]),
                       check=True, capture_output=True, timeout=120)
        subprocess.run(_as_owner([str(bins / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t", "60",
                                  "-o", f"-p {port} -c listen_addresses=127.0.0.1 -k {sock} "
                                        "-c max_connections=200", "start"]),
                       check=True, capture_output=True, timeout=90)
        yield Postgres(port=port, root=root)
    except subprocess.CalledProcessError as e:
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        raise RuntimeError(f"PostgreSQL did not start: {e.stderr.decode(errors='replace')[-2000:]}\n{tail}") from e
    finally:
        if (data / "postmaster.pid").exists():
            subprocess.run(_as_owner([str(bins / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"]),
                           capture_output=True, timeout=60)
        shutil.rmtree(root, ignore_errors=True)
