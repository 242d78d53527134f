"""Data-parallel training on the jax executor (level 3): ``d5 run --ranks 2`` passes,
and two ranks under the allreduce scheme end where one process ends on the 2x batch
(float64). The scheme exchanges numpy gradients on the host, counted by the MPI
communicator like every framework's; the jax-* optimizer then steps on numpy arrays."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from d5core.testing.distributed import (
    assert_ranks_end_where_one_process_ends,
    d5_run_on_ranks,
    mpi_unavailable,
)

RECIPE = Path(__file__).resolve().parents[3] / "recipes" / "digits-mlp.toml"
RANKS = 2

pytestmark = pytest.mark.skipif(mpi_unavailable() is not None, reason=str(mpi_unavailable()))


def test_d5_run_on_two_ranks_with_the_jax_executor_and_jax_momentum_passes(
    tmp_path: Path,
) -> None:
    sets = ["executor=jax", "optimizer=jax-momentum"]
    db = tmp_path / "r.sqlite"
    doc = d5_run_on_ranks(RECIPE, sets, RANKS, db)
    assert doc["metrics"]["final_test_accuracy"] >= 0.9
    assert doc["distributed"]["ranks"] == RANKS and doc["distributed"]["scheme"] == "allreduce"
    # every step's float32 gradients went through the communicator, and were counted
    with closing(sqlite3.connect(db)) as con:
        rows = dict(con.execute("SELECT name || labels, value FROM run_metrics").fetchall())
    steps = [v for k, v in rows.items() if k.startswith("rank_steps")]
    sent = [v for k, v in rows.items() if k.startswith("rank_bytes_sent")]
    assert len(steps) == len(sent) == RANKS
    gradient_bytes = (64 * 64 + 64 + 64 * 10 + 10) * 4  # the recipe's MLP, float32
    for n, b in zip(steps, sent, strict=True):
        assert b >= n * gradient_bytes > 0


def test_two_allreduce_ranks_end_where_one_process_ends_on_the_double_batch(
    tmp_path: Path,
) -> None:
    """The one process trains on the native path, its step compiled as one call."""
    from d5_plugin_mpi import launch

    assert_ranks_end_where_one_process_ends(
        tmp_path, "jax", "jax-momentum", launch.build_command, ranks=RANKS, native=True
    )
