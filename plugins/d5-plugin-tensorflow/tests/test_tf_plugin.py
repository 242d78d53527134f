"""The plugin module: hooks that never import TensorFlow, threads set before the first op."""

from __future__ import annotations

import json
import subprocess
import sys

from d5_plugin_tensorflow import _tf, plugin

from d5core.testing.kernel import fitness_threads


def _python(code: str, **env: str) -> str:
    import os

    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **env},
    )
    return out.stdout.strip()


def test_listing_and_thread_settings_never_import_tensorflow() -> None:
    code = (
        "import sys; from d5_plugin_tensorflow import plugin; "
        "print(plugin.d5_thread_settings(), 'tensorflow' in sys.modules)"
    )
    assert _python(code).split() == ["None", "False"]


def test_threads_follow_omp_num_threads_and_run_graphs_one_op_at_a_time() -> None:
    code = (
        "import json; from d5_plugin_tensorflow import _tf, plugin; tf = _tf.tensorflow(); "
        "tf.constant(1.0) + 1.0; print(json.dumps(plugin.d5_thread_settings()))"
    )
    settings = json.loads(_python(code, OMP_NUM_THREADS="1"))
    assert settings == {
        "tf.config.threading.intra_op_parallelism_threads": "1",
        "tf.config.threading.inter_op_parallelism_threads": "1",
    }


def test_a_process_whose_tensorflow_ran_first_reports_what_it_really_got() -> None:
    code = (
        "import json, tensorflow as tf; tf.constant(1.0) + 1.0; "
        "from d5_plugin_tensorflow import _tf; _tf.tensorflow(); print(json.dumps(_tf.settings()))"
    )
    found = json.loads(_python(code, OMP_NUM_THREADS="1"))
    assert found["set_by_d5"] is False
    assert found["intra_op_parallelism_threads"] == 0  # TensorFlow's own choice, reported


def test_the_fitness_record_carries_tensorflow_thread_pools() -> None:
    _tf.tensorflow()
    threads = fitness_threads()
    assert threads["tf.config.threading.intra_op_parallelism_threads"] == str(
        _tf.settings()["intra_op_parallelism_threads"]  # type: ignore[index]
    )


def test_thread_count_reads_a_positive_omp_num_threads_only() -> None:
    assert _tf.thread_count({"OMP_NUM_THREADS": "3"}) == 3
    assert _tf.thread_count({"OMP_NUM_THREADS": "0"}) >= 1
    assert _tf.thread_count({"OMP_NUM_THREADS": "many"}) >= 1


def test_environment_info_never_imports_tensorflow() -> None:
    code = (
        "import sys; from d5_plugin_tensorflow import plugin; "
        "info = plugin.d5_environment_info(); "
        "print(info['tensorflow'], info['imported'], 'tensorflow' in sys.modules)"
    )
    version, imported, loaded = _python(code).split()
    assert version.startswith("2.21") and imported == "False" and loaded == "False"


def test_environment_info_records_the_build_and_the_pools() -> None:
    _tf.tensorflow()
    info = plugin.d5_environment_info()
    assert info["tensorflow"].startswith("2.21")
    assert "intra_op_parallelism_threads" in info and info["op_determinism"] is True
    assert isinstance(info["build"], dict)


def test_the_plugin_check_passes() -> None:
    assert plugin.d5_plugin_check() == []
