"""Issue 11 end to end: ``d5 bench`` numbers that can be trusted, bad input refused in one
line, ``d5 validate net`` labels (items 1, 4, 6, 12 and 18). Integration lane: numpy,
torch and onnxruntime executors."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from d5core.cli.output import read_json
from d5core.results.store import ResultsStore


@pytest.fixture
def db(tmp_path, monkeypatch):
    path = tmp_path / "results.sqlite"
    monkeypatch.setenv("D5_DB", str(path))
    return path


def _conv_model(out_channels: int, size: int, batch: int | str) -> onnx.ModelProto:
    """x (batch, 2, size, size) -> Conv 3x3, pad 1 -> y (batch, out_channels, size, size)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 2, size, size])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, out_channels, size, size])
    weight = np.random.default_rng(0).standard_normal((out_channels, 2, 3, 3))
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], name="conv")],
        "g", [x], [y], [numpy_helper.from_array(weight.astype(np.float32), "w")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _measurements(db, run_id, metric):
    with ResultsStore.open(db) as store:
        return [(m, store.samples(m.id)) for m in store.measurements(run_id) if m.metric == metric]


def _metrics(db, run_id, name):
    with ResultsStore.open(db) as store:
        return [m for m in store.metrics(run_id) if m.name == name]


def _one_line_error(result, text):
    assert result.exit_code == 2, result.stderr
    assert result.stderr.startswith("d5: error: ") and result.stderr.count("\n") == 1
    assert text in result.stderr


# -- item 1 ----------------------------------------------------------------------------


def test_bench_net_refuses_a_batch_the_light_resnet50_cannot_run(db, d5_cli):
    result = d5_cli("bench", "net", "resnet50", "--executors", "onnxruntime", "--batch", "32")
    _one_line_error(result, "fixed batch of 1")
    with ResultsStore.open(db) as store:
        assert store.list_runs() == []  # refused before a run was opened


def test_bench_net_throughput_counts_the_samples_that_ran(db, tmp_path, d5_cli):
    path = tmp_path / "fixed4.onnx"
    onnx.save(_conv_model(4, 8, batch=4), path)
    result = d5_cli(
        "bench", "net", str(path), "--executors", "numpy,onnxruntime", "--time-budget", "0.2",
        "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    for row in read_json(result.stdout):
        assert row["batch"] == 4
        assert row["throughput"] == pytest.approx(4 / row["median"])
        ((stored, rates),) = _of(_measurements(db, row["run_id"], "throughput"), row)
        ((_, times),) = _of(_measurements(db, row["run_id"], "time"), row)
        assert stored.labels["batch"] == 4
        assert rates == pytest.approx([4 / t for t in times])


def _of(measurements, row):
    return [(m, s) for m, s in measurements if m.labels["executor"] == row["executor"]]


# -- item 4 ----------------------------------------------------------------------------


def test_bench_net_breakdown_is_stored_for_every_executor_onnxruntime_included(db, d5_cli):
    result = d5_cli(
        "bench", "net", "lenet5", "--executors", "numpy,torch,onnxruntime", "--batch", "8",
        "--time-budget", "0.2", "--breakdown", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    rows = read_json(result.stdout)
    run_id = rows[0]["run_id"]
    stored = _measurements(db, run_id, "node_time")
    sums = {m.labels["executor"]: m.value for m in _metrics(db, run_id, "node_time_sum")}
    for row in rows:
        assert row["breakdown"], f"{row['executor']} gave no breakdown"
        mine = [(m, s) for m, s in stored if m.labels["executor"] == row["executor"]]
        assert len(mine) == len(row["breakdown"])
        assert all(m.unit == "s" and len(s) >= 5 for m, s in mine)
        assert sums[row["executor"]] == pytest.approx(row["breakdown_sum"])
        assert row["breakdown_sum"] == pytest.approx(sum(n["median"] for n in row["breakdown"]))
        # either the node times add up to the step, or the run says not to trust them
        off = abs(row["breakdown_sum"] - row["median"]) / row["median"]
        assert (off <= 0.10) == (row["breakdown_note"] == ""), row["breakdown_note"]
        if row["breakdown_note"]:
            assert row["breakdown_note"] in result.stderr


def test_a_training_step_breakdown_keeps_backward_apart_and_says_what_it_lacks(db, d5_cli):
    result = d5_cli(
        "bench", "net", "mlp", "--executors", "numpy,torch", "--mode", "train-step",
        "--batch", "8", "--time-budget", "0.2", "--breakdown", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    numpy_row, torch_row = read_json(result.stdout)
    assert {n["direction"] for n in numpy_row["breakdown"]} == {"forward", "backward"}
    keys = [(n["node"], n["direction"]) for n in numpy_row["breakdown"]]
    assert len(keys) == len(set(keys))
    assert "breaks down the forward nodes only" in torch_row["breakdown_note"]
    assert "d5: warning: the torch executor breaks down the forward nodes only" in result.stderr


def test_a_training_step_with_batch_normalization_passes_its_timed_accuracy_check(db, d5_cli):
    # the timed step normalises with the batch's statistics: it is checked against an
    # untimed training pass, not against inference (the running statistics)
    result = d5_cli(
        "bench", "net", "vgg", "--executors", "numpy", "--mode", "train-step",
        "--batch", "2", "--time-budget", "0.1", "--processes", "1", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    (row,) = read_json(result.stdout)
    assert row["mode"] == "train-step" and row["median"] > 0


# -- item 6 ----------------------------------------------------------------------------


def test_bench_op_stores_gflops_and_the_peak_for_a_problem_given_by_shape(db, d5_cli, monkeypatch):
    monkeypatch.setenv("D5_PEAK_GFLOPS", "1000")
    result = d5_cli(
        "bench", "op", "Gemm", "--backends", "numpy", "--shape", "64x32,32x16",
        "--time-budget", "0.1", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    (row,) = read_json(result.stdout)
    flops = 2 * 64 * 16 * 32
    assert row["gflops"] == pytest.approx(flops / row["median"] / 1e9)
    assert row["peak_fraction"] == pytest.approx(row["gflops"] / row["threads_peak_gflops"])
    ((gflops, rates),) = _measurements(db, row["run_id"], "gflops")
    ((_, times),) = _measurements(db, row["run_id"], "time")
    assert gflops.unit == "GFLOP/s"
    assert rates == pytest.approx([flops / t / 1e9 for t in times])
    machine, backend = _metrics(db, row["run_id"], "peak_gflops")
    assert machine.value == 1000 and machine.labels["source"] == "D5_PEAK_GFLOPS"
    assert backend.value == row["threads_peak_gflops"] and backend.labels["backend"] == "numpy"
    (fraction,) = _metrics(db, row["run_id"], "peak_fraction")
    assert fraction.value == pytest.approx(row["peak_fraction"])


def test_bench_op_divides_a_one_thread_backend_by_the_peak_of_one_core(db, d5_cli, monkeypatch):
    from d5core.lv0.workloads.roofline import usable_cores

    monkeypatch.setenv("D5_PEAK_GFLOPS", "1000")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # numpy's BLAS threads, read by the workers
    result = d5_cli(
        "bench", "op", "Gemm", "--backends", "numpy", "--shape", "64x32,32x16",
        "--time-budget", "0.05", "--processes", "1", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    (row,) = read_json(result.stdout)
    assert row["threads"] == 1
    one_core = 1000 / usable_cores()
    assert (row["threads_peak_gflops"], row["peak_cores"]) == (pytest.approx(one_core), 1)
    assert row["peak_fraction"] == pytest.approx(row["gflops"] / one_core)
    assert row["peak_gflops"] == 1000  # the machine's, on every usable core
    (_, stored) = _metrics(db, row["run_id"], "peak_gflops")
    assert (stored.value, stored.labels["cores"]) == (pytest.approx(one_core), 1)


# -- item 12 ---------------------------------------------------------------------------


def test_validate_net_passes_a_model_with_a_spatial_output(db, tmp_path, d5_cli):
    path = tmp_path / "spatial.onnx"
    onnx.save(_conv_model(3, 8, batch="N"), path)
    result = d5_cli("validate", "net", str(path), "--executor", "torch", "--json")
    report = read_json(result.stdout)
    assert result.exit_code == 0, report["failures"]
    assert report["gradients"] and all(g["passed"] for g in report["gradients"])


# -- item 18 ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--dtype", "float128x"], {}, "unknown dtype 'float128x'"),
        (["--shape", "1000000x1000000,1000000x1000000"], {}, "GiB of memory available"),
        (["--shape", ""], {}, "--shape is empty"),
        (["--backends", "numpy,numpy"], {}, "backends lists 'numpy' twice"),
        ([], {"D5_PEAK_GFLOPS": "abc"}, "D5_PEAK_GFLOPS must be a positive number"),
        ([], {"D5_PEAK_GFLOPS": "-5"}, "D5_PEAK_GFLOPS must be a positive number"),
    ],
)
def test_bad_bench_op_input_is_a_one_line_error(args, env, message, db, d5_cli, monkeypatch):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    backends = [] if "--backends" in args else ["--backends", "numpy"]
    result = d5_cli("bench", "op", "Gemm", *backends, *args, "--time-budget", "0.1")
    _one_line_error(result, message)
    with ResultsStore.open(db) as store:
        assert store.list_runs() == []  # refused before a run was opened


def test_bench_net_refuses_an_executor_listed_twice(db, d5_cli):
    result = d5_cli("bench", "net", "mlp", "--executors", "numpy,numpy")
    _one_line_error(result, "executors lists 'numpy' twice")


def test_the_suite_hint_names_suites_that_have_the_operator(db, d5_cli):
    result = d5_cli("bench", "op", "Conv", "--backends", "numpy", "--suite", "cpu-small-gemm")
    _one_line_error(result, "suites that have: cpu-small, cpu-small-conv")
