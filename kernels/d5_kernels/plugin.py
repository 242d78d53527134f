"""The plugin module of d5-kernels: what it records about the environment, the threads it
uses, a fitness check that runs a small product through the compiled GEMM, and the
profiler of a traced run (the kernels' own regions).

Nothing is imported at module level but d5's API: ``d5 list-plugins`` loads this module,
and the compiled extension imports numpy. Each hook imports what it needs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from d5core.api import hookimpl

if TYPE_CHECKING:
    from d5core.api import TraceProfiler

__all__ = [
    "BACKEND_NAMES",
    "d5_environment_info",
    "d5_plugin_api",
    "d5_plugin_check",
    "d5_thread_settings",
    "d5_trace_profiler",
]

d5_plugin_api = ">=1.12,<2"

#: The names d5-kernels' backend is registered under (its ``d5.operators`` entry points).
BACKEND_NAMES = frozenset({"native"})


@hookimpl
def d5_environment_info() -> Mapping[str, Any]:
    from d5_kernels import __version__, runtime

    chosen = runtime.isa()
    return {
        "d5-kernels": __version__,
        "isa": chosen,
        "available_isas": runtime.available_isas(),
        "isa_forced_by": runtime.forced_isa(),
        "compiler": runtime.compiler(),
        "openmp": runtime.openmp_version(),
        "omp_threads": runtime.num_threads(),
        "gemm_blocking_float32": runtime.blocking(chosen, "float32")._asdict(),
    }


@hookimpl
def d5_thread_settings() -> Mapping[str, str] | None:
    from d5_kernels import runtime

    return {"d5_kernels.omp_threads": str(runtime.num_threads())}


@hookimpl
def d5_plugin_check() -> list[str]:
    import numpy as np

    from d5_kernels import _native, runtime

    x = np.arange(6, dtype=np.float64).reshape(2, 3)
    y = np.empty((2, 2))
    try:
        _native.gemm(x, x.T, y, 1.0, 0.0)
    except Exception as exc:  # a broken build must be reported, not raised
        return [f"d5-kernels' compiled GEMM failed ({exc}); reinstall d5-kernels"]
    if y.tolist() != [[5.0, 14.0], [14.0, 50.0]]:
        return [f"d5-kernels' GEMM ({runtime.isa()}) computed a wrong 2x3 matrix product"]
    return []


@hookimpl
def d5_trace_profiler(executor: str, level: str, subject: object) -> TraceProfiler | None:
    """The kernels' tracer for a traced run of the native backend; ``None`` for any
    other executor."""
    if executor not in BACKEND_NAMES:
        return None
    from d5_kernels.trace import NativeTraceProfiler

    return NativeTraceProfiler()
