"""The plugin module of d5-plugin-mxnet.

Loading it imports no MXNet (about a second): listing plugins must not pay for it. It
refuses to load, with one line naming the fix, when the installed numpy is one MXNet
1.9.1 cannot import beside (:func:`d5_plugin_mxnet._mx.numpy_problem`): every entry of
the distribution is then shown as failed by ``d5 list-plugins``, with that reason.

MXNet runs operators asynchronously on the CPU too: its operators and executor are
marked ``asynchronous``, and :func:`d5_synchronize` waits for the engine, so that the
measurement engine reads its clock only once queued work is done.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from importlib import metadata
from typing import TYPE_CHECKING, Any

from d5_plugin_mxnet import _mx
from d5core.api import PluginError, hookimpl

if TYPE_CHECKING:
    from d5core.api import TraceProfiler

d5_plugin_api = ">=1.12,<2"

_problem = _mx.numpy_problem()
if _problem:
    raise PluginError(_problem)


def _loaded() -> Any:
    """mxnet, if the measured work already imported it; never import it for a hook."""
    mx = sys.modules.get("mxnet")
    return mx if mx is not None and hasattr(mx, "nd") else None


@hookimpl
def d5_environment_info() -> Mapping[str, Any]:
    mx = _loaded()
    if mx is None:
        try:
            version: str | None = metadata.version("mxnet")
        except metadata.PackageNotFoundError:
            version = None
        return {"mxnet": version, "imported": False}
    features = mx.runtime.Features()
    info: dict[str, Any] = {
        "mxnet": mx.__version__,
        # The wheel is built for a baseline ISA (no AVX2 in its own kernels) and uses
        # oneDNN (MKLDNN), which dispatches at run time: a fairness fact worth keeping.
        "features": sorted(name for name in features if features.is_enabled(name)),
    }
    info.update(_mx.settings() or {})
    return info


@hookimpl
def d5_synchronize(device: str) -> None:
    """Wait for every operation MXNet's engine has queued (on any of its devices)."""
    mx = _loaded()
    if mx is not None:
        mx.nd.waitall()


@hookimpl
def d5_thread_settings() -> Mapping[str, str] | None:
    found = _mx.settings()
    if found is None:
        return None
    return {
        "mxnet.omp_threads": str(found["omp_threads"]),
        "mxnet engine worker threads": str(found["cpu_worker_threads"]),
    }


@hookimpl
def d5_plugin_check() -> list[str]:
    try:
        mx = _mx.mxnet()
    except Exception as exc:
        return [f"cannot import mxnet ({exc}); pip install mxnet==1.9.1 numpy==1.23.5"]
    x = mx.nd.arange(6, dtype="float64").reshape((2, 3))
    got = mx.nd.dot(x, x, transpose_b=True).asnumpy().tolist()
    if got != [[5.0, 14.0], [14.0, 50.0]]:
        return [f"mxnet {mx.__version__} computed a wrong 2x3 matrix product"]
    return []


@hookimpl
def d5_custom_op_glue() -> Any:
    """The MXNet glue of C++ custom operators (an external operator library)."""
    from d5_plugin_mxnet.custom_op import MXNetCustomOpGlue

    return MXNetCustomOpGlue()


@hookimpl
def d5_trace_profiler(executor: str, level: str) -> TraceProfiler | None:
    """MXNet's profiler for a traced run of the executor or operator backend ``mxnet``
    (its operators, and its memory counters at level ``full``); ``None`` for any other
    executor. Creating it imports nothing; ``start()`` imports MXNet."""
    from d5_plugin_mxnet.trace import EXECUTORS, MXNetTraceProfiler

    return MXNetTraceProfiler(level) if executor in EXECUTORS else None
