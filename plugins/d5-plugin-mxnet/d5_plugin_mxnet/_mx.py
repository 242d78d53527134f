"""The one place MXNet is imported, after checking that it can be.

MXNet 1.9.1 is the framework's last release. It uses numpy names that numpy 1.24 removed
(``np.bool``) and fails inside its own import beside any later numpy, numpy 2 included.
:func:`numpy_problem` says so from the installed versions, without importing anything;
the plugin module refuses to load with that one line, so that ``d5 list-plugins`` shows
the reason and the fix instead of a traceback from deep inside MXNet.

Every module of the plugin that needs MXNet calls :func:`mxnet` (never a bare ``import
mxnet``). Before the first import it sets what MXNet reads only at start-up:

- **threads**: MXNet sizes its OpenMP pool by ``OMP_NUM_THREADS`` when set, else by the
  cores this process may run on (libgomp reads the affinity mask): d5's thread count
  either way (:func:`thread_count`), the rule the other plugins follow. The variable is
  left as the user set it, so the recorded environment is the user's. The engine's CPU
  worker threads stay at MXNet's default of one, so operators run one after the other,
  as torch and onnxruntime (sequential mode) do;
- **gradient sums**: ``MXNET_EXEC_INPLACE_GRAD_SUM_CAP`` is set to 0 unless the user set
  it, so that a value read by several nodes sums its gradients with an explicit
  ``ElementWiseSum`` instead of in-place ``kAddTo`` writes: with ``static_alloc`` the
  in-place sums give wrong gradients in MXNet 1.9.1 (an embedding feeding both a
  LayerNormalization and a residual Add, as every transformer block has, got about half
  its gradient);
- the values MXNet started with are reported by :func:`settings`, never assumed.
"""

from __future__ import annotations

import os
import sys
from importlib import metadata
from typing import Any

from packaging.version import Version

__all__ = ["FIRST_BROKEN_NUMPY", "mxnet", "numpy_problem", "settings", "thread_count"]

#: The first numpy release MXNet 1.9.1 cannot import beside.
FIRST_BROKEN_NUMPY = Version("1.24")

_started: dict[str, str] | None = None


def numpy_problem() -> str | None:
    """Why MXNet cannot be imported beside the installed numpy, or ``None``."""
    try:
        found = metadata.version("numpy")
    except metadata.PackageNotFoundError:
        return None
    if Version(found) < FIRST_BROKEN_NUMPY:
        return None
    return (
        f"mxnet 1.9.1 cannot import beside numpy {found} (it needs numpy 1.23.x); "
        f"run MXNet in an environment of its own: `make mxnet` builds .venv-mxnet, or "
        f"pip install 'numpy==1.23.5' in a virtualenv that has no TensorFlow or torch"
    )


def thread_count(environ: dict[str, str] | None = None) -> int:
    """Threads per operator: ``OMP_NUM_THREADS`` if a positive integer, else the number
    of cores this process may run on."""
    env = os.environ if environ is None else environ
    value = env.get("OMP_NUM_THREADS", "").strip()
    if value.isdigit() and int(value) > 0:
        return int(value)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def mxnet() -> Any:
    """The ``mxnet`` module, imported once with the settings of the module docstring.

    :raises ImportError: with :func:`numpy_problem`'s line when numpy is too new.
    """
    global _started
    if "mxnet" not in sys.modules:
        problem = numpy_problem()
        if problem:
            raise ImportError(problem)
    # read when MXNet first builds a backward graph: set even when something imported
    # MXNet before this module
    os.environ.setdefault("MXNET_EXEC_INPLACE_GRAD_SUM_CAP", "0")
    import mxnet as mx

    if _started is None:
        _started = {
            name: os.environ.get(name, "")
            for name in (
                "OMP_NUM_THREADS",
                "MXNET_CPU_WORKER_NTHREADS",
                "MXNET_ENGINE_TYPE",
                "MXNET_EXEC_INPLACE_GRAD_SUM_CAP",
            )
        }
    return mx


def settings() -> dict[str, Any] | None:
    """MXNet's engine and thread settings as it started, or ``None`` when this process
    has not imported MXNet (this never imports it)."""
    mx = sys.modules.get("mxnet")
    if mx is None or not hasattr(mx, "runtime"):
        return None
    started = _started or {}
    return {
        "omp_threads": thread_count(dict(started)),
        "omp_num_threads": started.get("OMP_NUM_THREADS")
        or "unset (one thread per core this process may run on)",
        "cpu_worker_threads": started.get("MXNET_CPU_WORKER_NTHREADS") or "1 (default)",
        "engine": started.get("MXNET_ENGINE_TYPE") or "ThreadedEnginePerDevice (default)",
    }
