"""check_accuracy (d5core.loadgen.accuracy, issue 19 item 3) end to end on logs written
from the numpy executor's own outputs, and the wrong-executor fixture's outputs against
the numpy executor's: both need the numpy plugin, which the core lane does not have."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from d5core.errors import UsageError
from d5core.loadgen.accuracy import ACCURACY_LOG, check_accuracy, reference_outputs


def _write(path: Path, entries: list[dict[str, object]]) -> Path:
    path.write_text(json.dumps(entries))
    return path


# -- check_accuracy end to end, on logs written here from the numpy executor ------------


def _accuracy_run(tmp_path: Path, offset: float, *, mode: str = "accuracy"):
    """A ScenarioResult of an accuracy run whose log holds the numpy executor's outputs
    for every sample of the seeded library, plus ``offset``."""
    from d5core.loadgen.loadgen import ScenarioResult
    from d5core.loadgen.settings import ScenarioSettings
    from d5core.loadgen.sut import sample_library
    from d5core.lv1.runner import executor_by_name, load_model

    settings = ScenarioSettings("offline", mode=mode, performance_sample_count=12, seed=3)
    network = load_model("lenet5")
    library = sample_library(network, settings)
    outputs = reference_outputs(executor_by_name("numpy", network), network, library)
    order = list(np.random.default_rng(0).permutation(len(library)))
    entries = []
    for seq, index in enumerate(order):
        data = b"".join((o + np.float32(offset)).tobytes() for o in outputs[index])
        entries.append({"seq_id": seq, "qsl_idx": int(index), "data": data.hex().upper()})
    log_dir = tmp_path / "logs"
    log_dir.mkdir(exist_ok=True)
    log = _write(log_dir / ACCURACY_LOG, entries)
    layout = [{"name": "output", "dtype": "float32", "shape": [10]}]
    return ScenarioResult(
        executor="candidate",
        scenario="offline",
        mode=mode,
        valid=None,
        failed_checks=[],
        metric_name="samples_per_second",
        metric_value=None,
        percentiles_s={},
        qps_with_overhead=None,
        qps_without_overhead=None,
        early_stopping={},
        latencies_s=[],
        log_dir=str(tmp_path),  # not where the log is: the result's "log" names it
        settings=settings,
        threads={},
        samples_issued=len(library),
        accuracy={"log": str(log), "outputs": layout},
    )


def test_check_accuracy_passes_the_reference_own_outputs(tmp_path):
    verdict = check_accuracy("lenet5", _accuracy_run(tmp_path, 0.0), reference="numpy")
    assert verdict["passed"] and verdict["checked"] == 12 and verdict["reference"] == "numpy"
    assert verdict["message"].startswith("accuracy of candidate: passed, 12 samples match numpy")
    assert "\n" not in verdict["message"]


def test_check_accuracy_catches_outputs_off_by_a_hundredth(tmp_path):
    verdict = check_accuracy("lenet5", _accuracy_run(tmp_path, 1e-2), reference="numpy")
    assert not verdict["passed"] and verdict["failed"] == 12
    message = verdict["message"]
    assert message.startswith("accuracy of candidate: FAILED, 12 of 12 samples differ from numpy")
    assert f"worst: sample {verdict['worst']['sample']}, output 'output': tol_ratio" in message
    assert "\n" not in message


def test_check_accuracy_takes_a_tolerance_that_allows_the_offset(tmp_path):
    run = _accuracy_run(tmp_path, 1e-2)
    assert check_accuracy("lenet5", run, reference="numpy", rtol=0.0, atol=0.05)["passed"]


def test_check_accuracy_refuses_a_performance_run_and_a_bad_tolerance(tmp_path):
    with pytest.raises(UsageError, match="only for a run with --accuracy"):
        check_accuracy("lenet5", _accuracy_run(tmp_path, 0.0, mode="performance"))
    with pytest.raises(UsageError, match="rtol -1"):
        check_accuracy("lenet5", _accuracy_run(tmp_path, 0.0), rtol=-1.0)


# -- the wrong-executor fixture (tests/fixtures/wrong-executor) ----------------------------

WRONGEXEC = Path(__file__).resolve().parents[1] / "fixtures" / "wrong-executor"


@pytest.mark.parametrize("offset", ["", "0", "-0.5"])
def test_the_wrong_executor_is_numpy_plus_its_offset(monkeypatch, offset):
    from d5core.lv1.runner import executor_by_name, load_model, make_feeds

    monkeypatch.syspath_prepend(str(WRONGEXEC / "d5-plugin-wrongexec"))
    monkeypatch.setenv("D5_WRONGEXEC_OFFSET", offset)
    from d5_plugin_wrongexec.executor import WrongExecutor

    network = load_model("lenet5")
    feeds = make_feeds(network, 2, seed=1)
    right = executor_by_name("numpy", network).inference(feeds)["output"]
    wrong = WrongExecutor(network).inference(feeds)["output"]
    assert wrong.dtype == right.dtype == np.float32
    np.testing.assert_allclose(wrong - right, float(offset or 1e-2), rtol=1e-3, atol=1e-6)
