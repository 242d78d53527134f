"""The plugin module of d5-plugin-tinygemm: d5 imports it on every start.

It imports nothing heavy: the components (``gemm``, ``executor``) are imported only when
a user selects them, or by ``d5_plugin_check`` when ``d5 list-plugins --check`` asks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from d5core.api import hookimpl

if TYPE_CHECKING:
    from d5core.api import TraceProfiler

__all__ = ["d5_environment_info", "d5_plugin_check", "d5_trace_profiler"]

d5_plugin_api = ">=1.12,<2"


@hookimpl
def d5_environment_info() -> Mapping[str, Any]:
    """The versions a result measured with this plugin depends on."""
    import numpy as np

    from d5_tinygemm import __version__

    return {"d5-plugin-tinygemm": __version__, "numpy": np.__version__}


@hookimpl
def d5_plugin_check() -> list[str]:
    """Run a 2x2 product through the operator and compare with the known answer."""
    import numpy as np

    from d5_tinygemm.gemm import TinyGemmBackend
    from d5core.api import TensorDescriptor

    a = np.array([[1.0, 2.0], [3.0, 4.0]])
    gemm = TinyGemmBackend().create("Gemm", {}, [TensorDescriptor.of(a)] * 2)
    (y,) = gemm.forward([a, a])
    if not np.array_equal(y, [[7.0, 10.0], [15.0, 22.0]]):
        return [f"Gemm of [[1, 2], [3, 4]] with itself gave {y.tolist()}; numpy is broken here"]
    return []


@hookimpl
def d5_trace_profiler(executor: str, level: str, subject: object) -> TraceProfiler | None:
    """tinygemm's Gemm calls and graph nodes, for a traced run of its executor or its
    operator backend (both named ``tinygemm``); ``None`` for anything else's."""
    if executor != "tinygemm":
        return None
    from d5_tinygemm.trace import TinyGemmProfiler

    return TinyGemmProfiler()
