"""A private PostgreSQL cluster for tests: started in a temporary folder, stopped by pid.

The PostgreSQL results store is tested against a real server::

    reason = postgres_unavailable()
    if reason is None:
        with PostgresCluster.start() as cluster:
            url = cluster.create_database()   # a fresh, empty database
            with ResultsStore.open(url) as store:
                ...

The cluster listens on 127.0.0.1 at a free port, with its socket in its own folder and
``trust`` authentication for the ``postgres`` user; durability settings are off (a test
server never survives a power cut). ``initdb`` and ``pg_ctl`` refuse to run as root:
run as root, they run as the ``postgres`` user (``runuser -u postgres --``, or
``su postgres -c``). The server is stopped with SIGINT to the pid in
``postmaster.pid`` (PostgreSQL's "fast" shutdown), and the folder removed.
"""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

__all__ = ["PostgresCluster", "find_postgres_bin", "postgres_unavailable", "query_database"]

#: How long starting or stopping the server may take, in seconds.
START_TIMEOUT_S = 60.0
_SERVER_OPTIONS = (
    "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
    "-c max_connections=200 -c listen_addresses=127.0.0.1"
)


def find_postgres_bin() -> Path | None:
    """The folder holding ``initdb`` and ``pg_ctl``: the newest of
    ``/usr/lib/postgresql/*/bin`` (Debian's layout), else the one on ``PATH``."""

    def version(path: str) -> tuple[int, ...]:
        name = Path(path).parent.parent.name
        return tuple(int(p) for p in name.split(".") if p.isdigit())

    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=version)
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("pg_ctl")
    if on_path and shutil.which("initdb"):
        return Path(on_path).parent
    return None


def _server_user() -> str | None:
    """The user to run the server as: ``postgres`` for root, else ``None`` (the
    current user, which PostgreSQL accepts)."""
    return "postgres" if os.geteuid() == 0 else None


def postgres_unavailable() -> str | None:
    """Why a private cluster cannot run here, in words for a skip message; ``None``
    when it can."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed: pip install 'd5core[postgres]'"
    if find_postgres_bin() is None:
        return (
            "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/pg_ctl, no pg_ctl "
            "on PATH): apt-get install postgresql"
        )
    if _server_user() == "postgres":
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root, and there is no 'postgres' user to run the server as"
        if shutil.which("runuser") is None and shutil.which("su") is None:
            return "running as root, and neither runuser nor su can switch to 'postgres'"
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_server_user(argv: list[str]) -> list[str]:
    user = _server_user()
    if user is None:
        return argv
    runuser = shutil.which("runuser")
    if runuser:
        return [runuser, "-u", user, "--", *argv]
    return ["su", user, "-c", shlex.join(argv)]


class PostgresCluster:
    """A running private PostgreSQL server; :meth:`start` one, :meth:`stop` it."""

    def __init__(self, root: Path, port: int) -> None:
        self.root = root
        self.port = port
        self._names = itertools.count(1)

    @property
    def data(self) -> Path:
        """The cluster's data folder."""
        return self.root / "data"

    @classmethod
    def start(cls, base: Path | None = None) -> PostgresCluster:
        """Create a cluster in a new folder (under ``base`` if given, which the
        ``postgres`` user must be able to enter when run as root; the system's temporary
        folder by default) and start it.

        :raises RuntimeError: when ``initdb`` or ``pg_ctl`` fails, with their output.
        """
        reason = postgres_unavailable()
        if reason is not None:
            raise RuntimeError(reason)
        bin_dir = find_postgres_bin()
        assert bin_dir is not None
        root = Path(tempfile.mkdtemp(prefix="d5-pg-", dir=base))
        user = _server_user()
        if user is not None:
            entry = pwd.getpwnam(user)
            os.chown(root, entry.pw_uid, entry.pw_gid)
        os.chmod(root, 0o755)
        port = _free_port()
        cluster = cls(root, port)
        init = _as_server_user(
            [str(bin_dir / "initdb"), "-D", str(cluster.data), "-U", "postgres",
             "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions"]
        )  # fmt: skip
        start = _as_server_user(
            [str(bin_dir / "pg_ctl"), "-D", str(cluster.data), "-l", str(root / "log"),
             "-o", f"-p {port} -k {root} {_SERVER_OPTIONS}", "-w", "-t",
             str(int(START_TIMEOUT_S)), "start"]
        )  # fmt: skip
        for argv in (init, start):
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=START_TIMEOUT_S + 10, check=False
            )
            if done.returncode != 0:
                log = root / "log"
                tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                cluster._remove()
                raise RuntimeError(
                    f"{argv[-1] if argv[-1] == 'start' else 'initdb'} failed "
                    f"({done.returncode}): {done.stdout}{done.stderr}{tail}"
                )
        return cluster

    def url(self, dbname: str = "postgres") -> str:
        """The URL of database ``dbname`` on this server, as user ``postgres``."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def create_database(self, name: str | None = None) -> str:
        """Create an empty database (a new name when ``None``) and return its URL."""
        import psycopg

        dbname = name or f"d5_test_{os.getpid()}_{next(self._names)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{dbname}"')
        return self.url(dbname)

    def execute(self, dbname: str, sql: str) -> list[tuple[object, ...]]:
        """Run one statement in database ``dbname`` as ``postgres``; its rows, if any."""
        import psycopg

        with psycopg.connect(self.url(dbname), autocommit=True) as conn:
            cur = conn.execute(sql)
            return list(cur.fetchall()) if cur.description else []

    def server_pid(self) -> int | None:
        """The postmaster's pid from ``postmaster.pid``; ``None`` when it is not running."""
        try:
            return int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    def stop(self) -> None:
        """Stop the server (SIGINT to its pid, then wait) and remove its folder."""
        pid = self.server_pid()
        if pid is not None:
            try:
                os.kill(pid, signal.SIGINT)
            except ProcessLookupError:
                pid = None
        deadline = time.monotonic() + START_TIMEOUT_S
        while pid is not None and time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        self._remove()

    def _remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PostgresCluster:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def query_database(
    target: str | os.PathLike[str], sql: str, params: tuple[object, ...] = ()
) -> list[tuple[object, ...]]:
    """Run one statement (``?`` placeholders) on a results database past the store: an
    SQLite file, or a PostgreSQL URL; its rows, if any. For tests that look at or change
    what is stored behind the store's back."""
    if isinstance(target, str) and "://" in target:
        import psycopg

        with psycopg.connect(target, autocommit=True) as conn:
            query = sql.replace("%", "%%").replace("?", "%s")
            cur = conn.execute(query, params or None)
            return list(cur.fetchall()) if cur.description else []
    import sqlite3

    lite = sqlite3.connect(target, isolation_level=None)
    try:
        return list(lite.execute(sql, params).fetchall())
    finally:
        lite.close()
