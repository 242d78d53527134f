"""The plugin module of d5-plugin-tensorflow.

Nothing here imports TensorFlow (its import takes seconds): listing plugins, recording
the environment and checking the machine's fitness must not pay for it. Hooks that
report on TensorFlow's state answer fully only once the measured work has imported it;
``d5_plugin_check`` imports it to run a product, and ``d5_trace_profiler`` when asked
about one of this plugin's executors (a traced run is about to use it).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from importlib import metadata
from typing import TYPE_CHECKING, Any

from d5_plugin_tensorflow import _tf
from d5core.api import hookimpl

if TYPE_CHECKING:
    from d5core.api import TraceProfiler

d5_plugin_api = ">=1.12,<2"


@hookimpl
def d5_environment_info() -> Mapping[str, Any]:
    tf = sys.modules.get("tensorflow")
    if tf is None or not hasattr(tf, "sysconfig"):
        # Not imported by the work measured in this process (a bench imports frameworks
        # in its workers): the version from the metadata, without a seconds-long import.
        return {"tensorflow": _installed_version(), "imported": False}
    build = dict(tf.sysconfig.get_build_info())
    info: dict[str, Any] = {
        "tensorflow": tf.__version__,
        "keras": _keras_version(),
        # TF's CPU wheel is built for a baseline ISA and says which instructions it
        # leaves unused; torch dispatches at run time: a fairness fact worth keeping.
        "build": {k: build[k] for k in sorted(build) if isinstance(build[k], str | bool | int)},
        "gpus": [d.name for d in tf.config.list_physical_devices("GPU")],
    }
    info.update(_tf.settings() or {})
    return info


def _installed_version() -> str | None:
    for name in ("tensorflow-cpu", "tensorflow"):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def _keras_version() -> str | None:
    try:
        import keras
    except Exception:
        return None
    return str(keras.__version__)


@hookimpl
def d5_thread_settings() -> Mapping[str, str] | None:
    found = _tf.settings()
    if found is None:
        return None
    return {
        "tf.config.threading.intra_op_parallelism_threads": str(
            found["intra_op_parallelism_threads"]
        ),
        "tf.config.threading.inter_op_parallelism_threads": str(
            found["inter_op_parallelism_threads"]
        ),
    }


@hookimpl
def d5_plugin_check() -> list[str]:
    try:
        tf = _tf.tensorflow()
    except Exception as exc:
        return [f"cannot import tensorflow ({exc}); pip install tensorflow-cpu==2.21.0"]
    x = tf.reshape(tf.range(6, dtype=tf.float64), (2, 3))
    got = tf.linalg.matmul(x, x, transpose_b=True).numpy().tolist()
    if got != [[5.0, 14.0], [14.0, 50.0]]:
        return [f"tensorflow {tf.__version__} computed a wrong 2x3 matrix product"]
    return []


@hookimpl
def d5_custom_op_glue() -> Any:
    """The TensorFlow glue of C++ custom operators (an op library with its gradient)."""
    from d5_plugin_tensorflow.custom_op import TensorflowCustomOpGlue

    return TensorflowCustomOpGlue()


@hookimpl
def d5_trace_profiler(executor: str) -> TraceProfiler | None:
    """TensorFlow's profiler for a traced run of an executor or operator backend of this
    plugin (``tensorflow``, ``tensorflow-xla``); ``None`` for any other, and when the
    installed TensorFlow ships no ``xplane_pb2`` to read its profile with. Answering
    for an executor of its own imports TensorFlow."""
    from d5_plugin_tensorflow.trace import EXECUTORS, TensorFlowTraceProfiler, xplane_module

    if executor not in EXECUTORS or xplane_module() is None:
        return None
    return TensorFlowTraceProfiler()
