"""The plugin module: hooks that never import JAX, XLA's threads set before it starts,
and the synchronization of JAX's asynchronous dispatch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata

import numpy as np
from d5_plugin_jax import _jax, plugin
from d5_plugin_jax.operators import JaxBackend

from d5core.api import TensorDescriptor
from d5core.testing.kernel import fitness_threads


def _python(code: str, **env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**environ, **env},
    )
    return out.stdout.strip()


def test_listing_environment_and_thread_settings_never_import_jax() -> None:
    code = (
        "import json, sys; from d5_plugin_jax import plugin; "
        "info = plugin.d5_environment_info(); threads = plugin.d5_thread_settings(); "
        "plugin.d5_synchronize('cpu'); "
        "print(json.dumps([info, threads, 'jax' in sys.modules, 'jaxlib' in sys.modules]))"
    )
    info, threads, jax_loaded, jaxlib_loaded = json.loads(_python(code))
    assert (threads, jax_loaded, jaxlib_loaded) == (None, False, False)
    assert info["imported"] is False
    for name in ("jax", "jaxlib", "optax"):
        assert info[name] == metadata.version(name)


def test_xla_gets_d5s_thread_count_before_it_starts() -> None:
    code = (
        "import json, os; from d5_plugin_jax import _jax, plugin; jax = _jax.jax(); "
        "jax.numpy.ones(2).sum().block_until_ready(); "
        "print(json.dumps([os.environ['XLA_FLAGS'], plugin.d5_thread_settings(), _jax.settings()]))"
    )
    flags, threads, found = json.loads(_python(code, OMP_NUM_THREADS="1"))
    assert flags == "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    assert threads == {_jax.THREAD_SETTING: "1"}
    assert found["set_by_d5"] is True and found["wanted_threads"] == 1


def test_flags_the_user_gave_xla_are_kept() -> None:
    code = (
        "import json, os; from d5_plugin_jax import _jax; jax = _jax.jax(); "
        "jax.numpy.ones(2).sum().block_until_ready(); "
        "print(json.dumps([os.environ['XLA_FLAGS'], _jax.settings()]))"
    )
    given = "--xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads=3"
    flags, found = json.loads(_python(code, OMP_NUM_THREADS="1", XLA_FLAGS=given))
    assert flags == given
    assert found["intra_op_parallelism_threads"] == 3 and found["set_by_d5"] is False


def test_xla_flags_put_a_dashed_flag_first_and_leave_a_flag_file_alone() -> None:
    assert _jax.xla_flags_for(4) == (
        "--xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads=4",
        ["--xla_cpu_multi_thread_eigen=true", "intra_op_parallelism_threads=4"],
    )
    assert _jax.xla_flags_for(2, "--xla_dump_to=/tmp/x") == (
        "--xla_cpu_multi_thread_eigen=true --xla_dump_to=/tmp/x intra_op_parallelism_threads=2",
        ["--xla_cpu_multi_thread_eigen=true", "intra_op_parallelism_threads=2"],
    )
    assert _jax.xla_flags_for(2, "/etc/xla.flags") == ("/etc/xla.flags", [])


def test_thread_count_reads_a_positive_omp_num_threads_only() -> None:
    assert _jax.thread_count({"OMP_NUM_THREADS": "3"}) == 3
    assert _jax.thread_count({"OMP_NUM_THREADS": "0"}) == len(os.sched_getaffinity(0))
    assert _jax.thread_count({"OMP_NUM_THREADS": "many"}) == len(os.sched_getaffinity(0))


def test_the_fitness_record_carries_jaxs_thread_count() -> None:
    _jax.jax()
    settings = _jax.settings()
    assert settings is not None
    assert fitness_threads()[_jax.THREAD_SETTING] == str(settings["intra_op_parallelism_threads"])


def test_environment_info_records_versions_devices_and_flags_once_imported() -> None:
    _jax.jax()
    info = plugin.d5_environment_info()
    assert info["imported"] is True and info["backend"] == "cpu"
    assert info["devices"] and info["xla_flags"] == os.environ["XLA_FLAGS"]
    assert info["x64_default"] is False


def test_the_plugin_check_passes(d5_plugin_manager) -> None:  # type: ignore[no-untyped-def]
    d5_plugin_manager.register(plugin)
    assert d5_plugin_manager.hook.d5_plugin_check() == [[]]


def test_synchronize_waits_for_the_outputs_of_the_last_timed_call() -> None:
    x = np.random.default_rng(0).normal(size=(64, 64)).astype(np.float32)
    op = JaxBackend().create("MatMul", {}, [TensorDescriptor.of(x)] * 2)
    assert op.asynchronous
    run = op.prepare_forward([x, x])
    (y,) = run()
    assert _jax.PENDING[0] == (y,)
    plugin.d5_synchronize("cpu")
    assert _jax.PENDING[0] is None and y.is_ready()
    np.testing.assert_allclose(np.asarray(y), x @ x, rtol=1e-4, atol=1e-4)


def test_compile_seconds_are_reported_apart_from_the_timed_call() -> None:
    x = np.ones((2, 3), np.float32)
    op = JaxBackend().create("Relu", {}, [TensorDescriptor.of(x)])
    op.prepare_forward([x])
    details = op.details()
    assert details["compile_s"] == op.compile_s
    assert isinstance(op.compile_s, float) and op.compile_s > 0
    assert details["jit"] is True and details["x64"] is False
    json.dumps(details)
