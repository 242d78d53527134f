"""Issue 14: each backend's thread count is recorded from its worker processes, and
backends compared with different thread counts are flagged.

"The thread count" of a framework is its intra-op pool (``THREAD_COUNT_SETTINGS``:
``torch.get_num_threads()``, TensorFlow's and ONNX Runtime's intra-op threads), and for
every other backend numpy's BLAS threads (``OMP_NUM_THREADS``, one per usable core when
unset). The rules are checked here on reported settings; a ``d5 bench op`` on fake
backends (core lane: no framework installed) shows the counts stored with the run, and
``compare_runs`` on stored runs the warning for a count that changed. Real frameworks
with different counts: tests/integration/test_thread_counts_cli.py.
"""

from __future__ import annotations

import json

import pytest

from d5core.measure.fitness import (
    BLAS_THREAD_SETTING,
    THREAD_COUNT_SETTINGS,
    ThreadCount,
    thread_count,
    thread_count_warning,
)
from d5core.measure.noise import NOISE_FLOOR_ENV
from d5core.results.store import ResultsStore

TORCH = THREAD_COUNT_SETTINGS["torch"]
TF = THREAD_COUNT_SETTINGS["tensorflow"]
ORT = THREAD_COUNT_SETTINGS["onnxruntime"]
JAX = THREAD_COUNT_SETTINGS["jax"]


def _count(backend, framework, *settings, cores=4):
    return thread_count(backend, framework, [(s, cores) for s in settings])


# -- which setting is the thread count ---------------------------------------------------


def test_the_thread_count_of_each_framework_is_its_intra_op_setting():
    assert THREAD_COUNT_SETTINGS == {
        "torch": "torch.get_num_threads()",
        "tensorflow": "tf.config.threading.intra_op_parallelism_threads",
        "onnxruntime": "onnxruntime.SessionOptions.intra_op_num_threads",
        "native": "d5_kernels.omp_threads",
        "mxnet": "mxnet.omp_threads",
        "jax": "jax.intra_op_parallelism_threads",
    }
    settings = {
        "OMP_NUM_THREADS": "3",
        TORCH: "2",
        "torch.get_num_interop_threads()": "4",
        TF: "1",
        "tf.config.threading.inter_op_parallelism_threads": "5",
        ORT: "6",
    }
    assert _count("torch", "torch", settings).threads == 2
    assert _count("tensorflow-xla", "tensorflow", settings).threads == 1
    assert _count("onnxruntime", "onnxruntime", settings).threads == 6
    # numpy, and any backend whose plugin has no pool of its own: numpy's BLAS threads
    assert _count("numpy", "numpy", settings).setting == BLAS_THREAD_SETTING
    assert _count("numpy", "numpy", settings).threads == 3
    assert _count("fakerelu", None, settings).threads == 3


def test_unset_blas_threads_and_a_zero_pool_mean_one_thread_per_usable_core():
    numpy = _count("numpy", "numpy", {"OMP_NUM_THREADS": None}, cores=3)
    assert numpy.threads == 3
    assert numpy.describe() == "numpy 3 threads (OMP_NUM_THREADS unset: one per usable core)"
    tensorflow = _count("tensorflow", "tensorflow", {TF: "0"}, cores=2)
    assert tensorflow.threads == 2


def test_the_thread_count_of_jax_is_the_intra_op_pool_xla_was_given():
    # d5-plugin-jax reports the intra_op_parallelism_threads of XLA_FLAGS; 0 (not
    # given) lets XLA choose: one thread per usable core
    settings = {"OMP_NUM_THREADS": "3", JAX: "1"}
    assert _count("jax", "jax", settings).threads == 1
    assert _count("jax", "jax", {JAX: "0"}, cores=2).threads == 2
    warning = thread_count_warning(
        [_count("jax", "jax", {JAX: "1"}), _count("torch", "torch", {TORCH: "2"})]
    )
    assert warning is not None and "jax 1 thread (jax.intra_op_parallelism_threads)" in warning


def test_a_third_party_plugin_declares_its_thread_count_by_its_name():
    # not in the core's table: the setting "<plugin>.threads" is its count when reported
    settings = {"OMP_NUM_THREADS": "3", "myfw.threads": "1", "myfw.other_pool": "4"}
    count = _count("myfw-fast", "myfw", settings)
    assert count.setting == "myfw.threads" and count.threads == 1
    # a plugin that does not report it is counted as numpy's BLAS threads
    assert _count("other", "other", settings).setting == BLAS_THREAD_SETTING


def test_a_framework_that_reports_no_pool_has_an_unknown_count():
    count = _count("onnxruntime", "onnxruntime", {"OMP_NUM_THREADS": "2"})
    assert count.threads is None and count.reported == (None,)
    assert count.describe() == (
        "onnxruntime an unknown number of threads "
        "(onnxruntime.SessionOptions.intra_op_num_threads not reported)"
    )


def test_processes_that_disagree_leave_the_count_open_and_show_both():
    count = _count("torch", "torch", {TORCH: "1"}, {TORCH: "2"})
    assert count.per_process == (1, 2) and count.threads is None
    assert count.describe() == "torch 1 or 2 threads (torch.get_num_threads())"


def test_a_thread_count_survives_json():
    count = _count("torch", "torch", {TORCH: "2"}, {TORCH: "2"})
    data = json.loads(json.dumps(count.to_json()))
    assert data["threads"] == 2 and data["setting"] == TORCH
    assert ThreadCount.from_json(data) == count


# -- the warning ---------------------------------------------------------------------------


def test_backends_with_different_thread_counts_are_warned_naming_both_counts():
    torch = _count("torch", "torch", {TORCH: "2"})
    tensorflow = _count("tensorflow", "tensorflow", {TF: "1"})
    warning = thread_count_warning([torch, tensorflow])
    assert warning is not None and "\n" not in warning
    assert warning.startswith(
        "the compared backends ran with different thread counts: torch 2 threads "
        "(torch.get_num_threads()), tensorflow 1 thread "
        "(tf.config.threading.intra_op_parallelism_threads); "
    )


def test_equal_counts_one_backend_or_unknown_counts_give_no_warning():
    torch = _count("torch", "torch", {TORCH: "2"})
    numpy = _count("numpy", "numpy", {"OMP_NUM_THREADS": "2"})
    unknown = _count("onnxruntime", "onnxruntime", {})
    assert thread_count_warning([torch, numpy]) is None
    assert thread_count_warning([torch]) is None
    assert thread_count_warning([torch, unknown]) is None


# -- recorded with the run, from the workers -----------------------------------------------

PLUGIN = """
from d5core.hookspecs import hookimpl
d5_plugin_api = ">=1.0,<2"
"""

BACKEND = """
import numpy as np
from d5core.levels.operators import Operator, OperatorBackend

class Relu(Operator):
    op_type = "Relu"
    def forward(self, inputs):
        return [np.maximum(inputs[0], 0)]

class Backend(OperatorBackend):
    def supported(self):
        return ["Relu"]
    def create(self, op_type, attributes, inputs):
        return Relu(attributes)
"""


@pytest.fixture
def two_numpy_backends(d5_site, monkeypatch, tmp_path):
    """Two backends computing with numpy, from two distributions, seen by the workers."""
    for name in ("threadsa", "threadsb"):
        d5_site.add(
            f"d5-plugin-{name}",
            entry_points={
                "d5.hooks": {name: f"{name}_plugin"},
                "d5.operators": {name: f"{name}_backend:Backend"},
            },
            modules={f"{name}_plugin.py": PLUGIN, f"{name}_backend.py": BACKEND},
        )
    db = tmp_path / "results.sqlite"
    monkeypatch.setenv("PYTHONPATH", str(d5_site.path))
    monkeypatch.setenv("D5_DB", str(db))
    monkeypatch.setenv(NOISE_FLOOR_ENV, "0.03")
    return db


def test_bench_op_stores_each_backends_thread_count_from_its_workers(
    two_numpy_backends, d5_cli, monkeypatch
):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    done = d5_cli(
        "bench", "op", "Relu", "--backends", "threadsa,threadsb", "--shape", "16x16",
        "--processes", "2", "--time-budget", "0.01", "--min-samples", "6", "--warmup", "1",
        "--json",
    )  # fmt: skip
    assert done.exit_code == 0, done.stderr
    assert "thread counts" not in done.stderr
    rows = json.loads(done.stdout)["data"]
    assert [
        (r["backend"], r["threads"], r["thread_setting"], r["thread_warning"]) for r in rows
    ] == [
        ("threadsa", 1, "OMP_NUM_THREADS", None),
        ("threadsb", 1, "OMP_NUM_THREADS", None),
    ]
    with ResultsStore.open(two_numpy_backends) as store:
        fitness = store.get_run(rows[0]["run_id"]).config["fitness"]
    stored = fitness["thread_counts"]
    assert sorted(stored) == ["threadsa", "threadsb"]
    for name, count in stored.items():
        # one report per worker process, as the worker saw its environment
        assert count == {
            "backend": name,
            "framework": name,
            "setting": "OMP_NUM_THREADS",
            "threads": 1,
            "reported": ["1", "1"],
            "per_process": [1, 1],
        }
    assert not any("thread counts" in w for w in fitness["warnings"])


def _stored_run(store, counts):
    config = {
        "fitness": {"warnings": [], "thread_counts": {c.backend: c.to_json() for c in counts}}
    }
    with store.run("op", "bench Relu", config=config, environment={}) as run_id:
        pass
    return run_id


def test_results_compare_warns_of_a_backend_whose_thread_count_changed_between_runs(tmp_path):
    from d5core.plugins import PluginManager
    from d5core.report.comparison import compare_runs

    db = tmp_path / "results.sqlite"
    with ResultsStore.open(db, manager=PluginManager({}, discover_installed=False)) as store:
        numpy = _count("numpy", "numpy", {"OMP_NUM_THREADS": "1"})
        baseline = _stored_run(store, [_count("torch", "torch", {TORCH: "2"}), numpy])
        candidate = _stored_run(store, [_count("torch", "torch", {TORCH: "1"}), numpy])
        again = _stored_run(store, [_count("torch", "torch", {TORCH: "1"}), numpy])
        changed = compare_runs(store, baseline, candidate)
        same = compare_runs(store, candidate, again)
    line = (
        f"torch ran with 2 threads in baseline {baseline} and 1 thread in candidate "
        f"{candidate} (torch.get_num_threads()): a change may come from the thread count"
    )
    assert changed.threads["warnings"] == [line]  # numpy: 1 thread in both, no warning
    assert line in changed.warnings()
    assert changed.to_json()["threads"]["baseline"]["torch"]["threads"] == 2
    assert same.threads["warnings"] == []
