"""``d5 run --ranks N`` refuses options the ranks would refuse, before anything runs or
is stored: one line, exit 2, no database written."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from d5core.errors import UsageError
from d5core.lv3.launch import check_rank_options
from d5core.plugins import get_plugin_manager

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "digits-mlp.toml"
D5 = Path(sys.executable).with_name("d5")
SETTINGS = {"batch_size": 32, "sampler": "shuffle", "sampler_options": {}, "seed": 0}


def _mpi_ready() -> str | None:
    here = Path(sys.executable).with_name("mpiexec")
    if not here.is_file() and shutil.which("mpiexec") is None:
        return "mpiexec is not installed (pip install mpich, or a system MPI)"
    return None


pytestmark = pytest.mark.skipif(_mpi_ready() is not None, reason=str(_mpi_ready()))


def _sgd() -> object:
    return get_plugin_manager().load("d5.optimizers", "sgd")(lr=0.1)


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--scheme-option", "foo=1"], "has no option 'foo'"),
        (["--scheme-option", "compression=bogus"], "unknown compression 'bogus'"),
        (["--scheme", "parameter-server", "--scheme-option", "servers=3"], "'servers'"),
        (["--global-batch", "--set", "batch_size=33"], "not a multiple of 2 ranks"),
    ],
    ids=["unknown-option", "bad-compression", "servers-above-ranks", "global-batch"],
)
def test_bad_rank_options_exit_2_and_store_nothing(tmp_path, options, says):
    db = tmp_path / "runs.sqlite"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "D5_TEST_"))}
    proc = subprocess.run(
        [str(D5), "run", str(RECIPE), "--ranks", "2", "--db", str(db), *options],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and says in lines[0], proc.stderr
    assert not db.exists()


@pytest.mark.parametrize(
    ("ranks", "kwargs", "says"),
    [
        (2, {"scheme_options": {"compression": {"name": "topk", "ratio": 5}}}, "ratio"),
        (4, {"scheme": "parameter-server", "scheme_options": {"servers": 5}}, "1..4"),
        (2, {"scheme": "model-averaging", "scheme_options": {"period": 0}}, "'period'"),
        (3, {"global_batch": True}, "batch_size 32 is not a multiple of 3 ranks"),
        (2, {"scheme": "sgd"}, "local optimizer"),
    ],
)
def test_check_rank_options_refuses_what_the_ranks_would(ranks, kwargs, says):
    args = {"scheme": "allreduce", "scheme_options": {}, "global_batch": False, **kwargs}
    with pytest.raises(UsageError, match=says):
        check_rank_options(SETTINGS, 1000, ranks, local=_sgd(), **args)


def test_check_rank_options_accepts_good_options():
    check_rank_options(SETTINGS, 1000, 4, local=_sgd(), scheme="parameter-server",
                       scheme_options={"servers": 2, "compression": None},
                       global_batch=True)  # fmt: skip


def test_check_rank_options_refuses_a_missing_mpiexec(monkeypatch):
    import d5_plugin_mpi.launch

    def missing() -> str:
        raise UsageError("no mpiexec found: install mpich (pip install mpich) or a system MPI")

    monkeypatch.setattr(d5_plugin_mpi.launch, "mpiexec_path", missing)
    with pytest.raises(UsageError, match="no mpiexec found"):
        check_rank_options(SETTINGS, 1000, 2, local=_sgd(), scheme="allreduce",
                           scheme_options={}, global_batch=False)  # fmt: skip
