"""Data-parallel training on the tensorflow executor (level 3): ``d5 run --ranks 2``
passes, and two ranks under the allreduce scheme end where one process ends on the
2x batch (float64)."""

from __future__ import annotations

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


def test_d5_run_on_two_ranks_with_the_tensorflow_executor_passes(tmp_path: Path) -> None:
    doc = d5_run_on_ranks(RECIPE, ["executor=tensorflow"], RANKS, tmp_path / "r.sqlite")
    assert doc["metrics"]["final_test_accuracy"] >= 0.9
    assert doc["distributed"]["ranks"] == RANKS and doc["distributed"]["scheme"] == "allreduce"


@pytest.mark.parametrize("optimizer", ["tf-momentum"])
def test_two_allreduce_ranks_end_where_one_process_ends_on_the_double_batch(
    tmp_path: Path, optimizer: str
) -> None:
    from d5_plugin_mpi import launch

    assert_ranks_end_where_one_process_ends(
        tmp_path, "tensorflow", optimizer, launch.build_command, ranks=RANKS
    )
