"""The results stores the store benchmarks write to: a SQLite file in a temporary folder,
and a PostgreSQL database, either one given by URL (``--postgres URL``, a database the
benchmark may fill) or a fresh one on a private cluster started for the benchmark and
stopped at its end (:mod:`d5core.testing.postgres`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["BACKENDS", "add_store_arguments", "store_targets"]

BACKENDS = ("sqlite", "postgresql")


def add_store_arguments(parser: argparse.ArgumentParser) -> None:
    """``--backends`` and ``--postgres``."""
    parser.add_argument(
        "--backends",
        default=None,
        help="comma-separated: sqlite, postgresql (default: both, side by side; SQLite "
        "alone, with a warning, where no PostgreSQL can be started)",
    )
    parser.add_argument(
        "--postgres",
        metavar="URL",
        help="a PostgreSQL database to write to, postgresql://user@host:port/dbname "
        "(default: a fresh database on a private cluster started for this run)",
    )


@contextlib.contextmanager
def store_targets(args: argparse.Namespace) -> Iterator[dict[str, str]]:
    """``{backend: --db value}`` for the backends asked for, each a store of its own;
    what was started for them (a folder, a cluster) is removed when the block ends."""
    asked = [b for b in (args.backends or ",".join(BACKENDS)).split(",") if b]
    if args.backends is None and not args.postgres:
        from d5core.testing.postgres import postgres_unavailable

        why = postgres_unavailable()
        if why is not None:
            print(f"warning: postgresql left out: {why}", file=sys.stderr)
            asked = ["sqlite"]
    unknown = sorted(set(asked) - set(BACKENDS))
    if unknown or not asked:
        raise SystemExit(f"--backends: choose from {', '.join(BACKENDS)}, not {unknown or asked}")
    with contextlib.ExitStack() as stack:
        targets: dict[str, str] = {}
        for backend in asked:
            if backend == "sqlite":
                folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="d5-store-"))
                targets[backend] = str(Path(folder) / "results.sqlite")
            elif args.postgres:
                targets[backend] = args.postgres
            else:
                targets[backend] = stack.enter_context(_private_database())
        yield targets


@contextlib.contextmanager
def _private_database() -> Iterator[str]:
    """A fresh database on a private PostgreSQL cluster, stopped at the end.

    The test clusters of :mod:`d5core.testing.postgres` run without ``fsync``; here the
    server is restarted durable (``fsync``, ``synchronous_commit`` and
    ``full_page_writes`` on, PostgreSQL's defaults), as a team's server runs and as the
    SQLite store writes (``synchronous = FULL``): every commit waits for the disk on both.
    """
    from d5core.testing.postgres import PostgresCluster, find_postgres_bin, postgres_unavailable

    why = postgres_unavailable()
    if why is not None:
        raise SystemExit(
            f"cannot start a private PostgreSQL cluster: {why}; or pass --postgres URL"
        )
    with PostgresCluster.start() as cluster:
        bin_dir = find_postgres_bin()
        assert bin_dir is not None
        restart = [str(bin_dir / "pg_ctl"), "-D", str(cluster.data), "-l",
                   str(cluster.root / "log"), "-w", "-o",
                   f"-p {cluster.port} -k {cluster.root} -c listen_addresses=127.0.0.1 "
                   "-c max_connections=200", "restart"]  # fmt: skip
        if os.geteuid() == 0:  # pg_ctl refuses root; the cluster belongs to postgres
            restart = ["runuser", "-u", "postgres", "--", *restart]
        subprocess.run(restart, check=True, capture_output=True, timeout=120)
        url = cluster.create_database()
        import psycopg

        with psycopg.connect(url) as conn:
            shown = [conn.execute(f"SHOW {name}").fetchone() for name in DURABLE]
        if shown != [("on",)] * len(DURABLE):
            raise SystemExit(
                f"the private cluster is not durable: {dict(zip(DURABLE, shown, strict=True))}"
            )
        yield url


#: The settings that make every commit wait for the disk.
DURABLE = ("fsync", "synchronous_commit", "full_page_writes")
