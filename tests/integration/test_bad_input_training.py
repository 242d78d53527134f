"""Bad training input that ``d5 run`` used to accept silently (issue 28, section 3): a
negative or non-finite learning rate inside a schedule, optimizer options outside their
range, and ``D5_DATA_DIR`` or ``D5_DISTRIBUTED_COMMUNICATOR`` naming nothing usable. Each
is refused in one line with exit 2, before a run is stored."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from d5core.errors import UsageError
from d5core.lv2.schedules import make_schedule
from d5core.results.store import ResultsStore

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "digits-mlp.toml"


def _run(d5_cli, tmp_path: Path, *args: str):
    db = tmp_path / "results.sqlite"
    result = d5_cli("run", str(RECIPE), *args, "--db", str(db))
    return result, db


def _assert_refused_before_storing(result, db: Path, *words: str) -> None:
    assert result.exit_code == 2, (result.stderr, result.stdout[-500:])
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("d5: error: "), result.stderr
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in lines[0], lines[0]
    if db.exists():
        with ResultsStore.open(db, create=False) as store:
            assert [r for r in store.list_runs() if r.kind == "train"] == []


# -- schedules -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    [
        -0.1,
        math.nan,
        math.inf,
        {"name": "constant", "lr": -0.5},
        {"name": "cosine", "lr": -0.1},
        {"name": "cosine", "lr": 0.1, "min_lr": -0.1},
        {"name": "step", "lr": 0.1, "step_size": 1, "gamma": -1.0},
        {"name": "step", "lr": 0.1, "step_size": 1, "gamma": math.nan},
        {"name": "warmup", "schedule": 0.1, "warmup_steps": 10, "start_factor": -1.0},
        {"name": "warmup", "schedule": {"name": "cosine", "lr": -1.0}, "warmup_steps": 5},
    ],
    ids=lambda spec: str(spec)[:40],
)
def test_a_schedule_giving_a_negative_or_non_finite_rate_is_refused_when_built(spec) -> None:
    with pytest.raises(UsageError, match=r"learning rate|gives") as caught:
        make_schedule(spec, total_steps=100)
    assert "\n" not in str(caught.value)


def test_a_schedule_that_turns_negative_late_is_refused_at_the_step_it_does() -> None:
    # a cosine to a negative floor crosses zero past half the run: the probes find it
    with pytest.raises(UsageError, match="at step"):
        make_schedule({"name": "cosine", "lr": 0.1, "min_lr": -0.05}, total_steps=1000)


def test_a_schedule_is_checked_at_every_step_it_gives_not_only_where_it_was_tried() -> None:
    # no total_steps: the probes stop at step 100, the rate turns negative past 610
    spec = {"name": "cosine", "lr": 0.1, "min_lr": -0.05, "total_steps": 1000}
    schedule = make_schedule(spec)
    assert schedule(100) > 0
    with pytest.raises(UsageError, match="at step 700"):
        schedule(700)


def test_valid_schedules_are_unchanged() -> None:
    cosine = make_schedule({"name": "cosine", "lr": 0.1}, total_steps=10)
    assert cosine(0) == pytest.approx(0.1) and cosine(10) == pytest.approx(0.0)
    step = make_schedule({"name": "step", "lr": 1.0, "step_size": 2, "gamma": 0.5})
    assert step(3) == 0.5


def test_d5_run_refuses_a_negative_rate_in_its_schedule_before_storing(d5_cli, tmp_path) -> None:
    result, db = _run(d5_cli, tmp_path, "--set", 'schedule={name="cosine", lr=-0.1}')
    _assert_refused_before_storing(result, db, "schedule 'cosine'", "-0.1")


# -- optimizer options -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("optimizer", "options", "word"),
    [
        ("adam", "{beta2=1.5}", "beta2"),
        ("adam", "{beta1=-0.1}", "beta1"),
        ("adam", "{eps=-1e-8}", "eps"),
        ("momentum", "{momentum=-0.9}", "momentum"),
        ("momentum", "{momentum=nan}", "momentum"),
        ("adam", "{eps=inf}", "eps"),
    ],
)
def test_d5_run_refuses_an_optimizer_option_out_of_its_range(d5_cli, tmp_path, optimizer,
                                                            options, word) -> None:  # fmt: skip
    result, db = _run(
        d5_cli, tmp_path, "--set", f"optimizer={optimizer}", "--set", f"optimizer_options={options}"
    )
    _assert_refused_before_storing(result, db, f"optimizer_options.{word}")


# -- environment variables -------------------------------------------------------------


@pytest.mark.parametrize("kind", ["device", "file", "missing", "under-a-file"])
def test_a_d5_data_dir_that_is_not_a_readable_folder_is_refused(d5_cli, tmp_path, monkeypatch,
                                                               kind) -> None:  # fmt: skip
    afile = tmp_path / "afile"
    afile.write_text("x")
    value = {
        "device": "/dev/null",
        "file": str(afile),
        "missing": str(tmp_path / "nowhere"),
        "under-a-file": str(afile / "data"),
    }[kind]
    if kind == "device" and not Path("/dev/null").exists():
        pytest.skip("no /dev/null here")
    monkeypatch.setenv("D5_DATA_DIR", value)
    result, db = _run(d5_cli, tmp_path)
    _assert_refused_before_storing(result, db, "D5_DATA_DIR", value)


def test_a_d5_data_dir_that_is_a_folder_is_recorded_as_before(d5_cli, tmp_path, monkeypatch):
    folder = tmp_path / "data"
    folder.mkdir()
    monkeypatch.setenv("D5_DATA_DIR", str(folder))
    from d5core.lv2.datasets._common import check_data_dir, data_root

    assert check_data_dir() == folder
    assert data_root("mnist", None) == folder / "mnist"


def test_an_unknown_d5_distributed_communicator_is_refused(d5_cli, tmp_path, monkeypatch):
    monkeypatch.setenv("D5_DISTRIBUTED_COMMUNICATOR", "bogus")
    result, db = _run(d5_cli, tmp_path)
    _assert_refused_before_storing(result, db, "D5_DISTRIBUTED_COMMUNICATOR", "bogus")
