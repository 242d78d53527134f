"""``benchmarks/train_e2e.py`` (issue 30): d5's time to accuracy beside hand-written loops.

The hand loops must do the work ``d5 run`` does, or the ratio means nothing: the same
data, initial weights and batch order (checked here against d5's own readers, zoo and
sampler), and, on every run, the same steps and final accuracy (checked by the benchmark,
and here on one round of torch).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import numpy_helper

from d5core.lv1 import zoo
from d5core.lv2.datasets import load_dataset
from d5core.lv2.samplers import make_sampler

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "train_e2e.py"
sys.path.insert(0, str(ROOT / "benchmarks" / "hand"))

import _problems  # noqa: E402


@pytest.mark.parametrize("recipe", sorted(_problems.PROBLEMS))
def test_hand_loops_read_the_data_d5_reads(recipe: str) -> None:
    problem = _problems.PROBLEMS[recipe]
    mine = _problems.load(problem)
    if problem.model == "mlp":
        name, options = "digits", {}
    else:
        name, options = "synthetic_images", dict(problem.options)
    for split, (x, y) in zip(("train", "test"), (mine[:2], mine[2:]), strict=True):
        theirs = load_dataset(name, split, **options)
        tx, ty = theirs.batch(np.arange(len(theirs)))
        assert x.dtype == tx.dtype and np.array_equal(x, tx)
        assert np.array_equal(y, ty)


@pytest.mark.parametrize("recipe", sorted(_problems.PROBLEMS))
def test_hand_loops_start_from_the_zoo_models_initial_weights(recipe: str) -> None:
    problem = _problems.PROBLEMS[recipe]
    x_train, y_train = _problems.load(problem)[:2]
    classes = int(y_train.max()) + 1
    options = {"hidden": [problem.options["hidden"]]} if problem.model == "mlp" else {}
    model = zoo.build(problem.model, input_shape=x_train.shape[1:], classes=classes, seed=0,
                      **options)  # fmt: skip
    zoo_weights = [numpy_helper.to_array(t) for t in model.model.graph.initializer]
    mine = _problems.he_weights(problem, x_train, classes)
    assert [w.shape for w in mine] == [w.shape for w in zoo_weights]
    for a, b in zip(mine, zoo_weights, strict=True):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("recipe", sorted(_problems.PROBLEMS))
def test_hand_loops_take_the_batches_of_d5s_shuffle_sampler(recipe: str) -> None:
    problem = _problems.PROBLEMS[recipe]
    size = len(_problems.load(problem)[1])
    sampler = make_sampler("shuffle", size, problem.batch_size, seed=problem.seed)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        theirs = [np.asarray(b) for b in sampler]
        mine = list(_problems.epoch_batches(problem, epoch, size))
        assert len(mine) == len(theirs)
        assert all(np.array_equal(a, b) for a, b in zip(mine, theirs, strict=True))


def test_one_round_on_torch_does_equal_work_and_reports_the_ratios() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--frameworks", "torch", "--recipes", "digits-mlp",
         "--rounds", "1", "--retries", "0", "--max-wait", "0", "--json",
         "--venv", sys.prefix],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    rows = {row["side"]: row for row in report["rows"]}
    assert set(rows) == {"hand", "d5 native", "d5 reference"}
    assert rows["hand"]["steps"] == [90]  # digits reaches 0.9 after two epochs of 45 steps
    for side in ("d5 native", "d5 reference"):
        row = rows[side]
        assert row["equal_work"] is True
        assert row["steps"] == rows["hand"]["steps"]
        ratio = row["tta_ratio"]
        assert ratio["ratio"] == pytest.approx(row["tta_s"] / rows["hand"]["tta_s"])
        assert ratio["min"] <= ratio["ratio"] <= ratio["max"]
        # one round: the interval is that round's ratio, and it decides the target
        assert ratio["ci_low"] == ratio["ci_high"] == pytest.approx(ratio["ratio"])
        assert row["verdict"] == ("met" if ratio["ratio"] <= row["target"] else "missed")
        assert row["targeted"] is True
        assert list(row["parts"]) == ["setup", "steps", "tests", "recording", "loop"]
        assert sum(row["parts"].values()) == pytest.approx(row["tta_s"], rel=1e-3)
    assert report["not_run"] == {}


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--recipes", "cifar10-resnet"], "--recipes: no hand loops for 'cifar10-resnet'"),
        (["--frameworks", "caffe"], "--frameworks: unknown 'caffe'"),
        (["--rounds", "0"], "--rounds must be at least 1"),
    ],
)
def test_bad_arguments_are_refused_in_one_line(args: list[str], says: str) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 2
    assert says in done.stderr.strip().splitlines()[-1]
    assert "Traceback" not in done.stderr


def _script():
    spec = importlib.util.spec_from_file_location("train_e2e", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("train_e2e", module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_a_target_is_decided_only_when_the_whole_interval_is_on_one_side_of_it() -> None:
    e2e = _script()
    assert e2e.verdict(0.90, 1.04, 1.05) == "met"
    assert e2e.verdict(0.90, 1.05, 1.05) == "met"
    assert e2e.verdict(1.06, 1.20, 1.05) == "missed"
    assert e2e.verdict(0.97, 1.12, 1.05) == "undecided"


def test_the_ratio_interval_draws_whole_rounds_and_holds_the_ratio_of_medians() -> None:
    e2e = _script()
    # every round the d5 side takes exactly 1.1 times the hand loop, whatever the round's
    # speed: drawing rounds whole keeps each resample's ratio at 1.1
    hand = [0.2, 0.3, 0.25, 0.5, 0.21, 0.4, 0.33]
    low, high = e2e.paired_ratio_ci([1.1 * h for h in hand], hand)
    assert low == pytest.approx(1.1) and high == pytest.approx(1.1)
    # noisy rounds: the interval widens and still holds the ratio of the medians
    d5 = [0.21, 0.36, 0.22, 0.61, 0.25, 0.38, 0.30]
    low, high = e2e.paired_ratio_ci(d5, hand)
    ratio = float(np.median(d5) / np.median(hand))
    assert low < ratio < high
    assert (low, high) == e2e.paired_ratio_ci(d5, hand)  # seeded: the same interval again

