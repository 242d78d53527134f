"""The plugin module of d5-plugin-numpy: its hooks and plugin-API range."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from d5core.api import hookimpl

d5_plugin_api = ">=1.3,<2"


@hookimpl
def d5_environment_info() -> Mapping[str, Any]:
    import numpy as np

    info: dict[str, Any] = {"numpy": np.__version__}
    try:
        config = np.show_config(mode="dicts")
        blas = config.get("Build Dependencies", {}).get("blas", {})
        info["blas"] = {k: blas.get(k) for k in ("name", "version", "openblas configuration")}
    except Exception:  # older numpy without mode="dicts"
        info["blas"] = None
    return info


@hookimpl
def d5_plugin_check() -> list[str]:
    import numpy as np

    a = np.arange(6, dtype=np.float64).reshape(2, 3)
    if not np.array_equal(a @ a.T, np.array([[5.0, 14.0], [14.0, 50.0]])):
        return ["numpy computed a wrong 2x3 matrix product; reinstall numpy"]
    return []


@hookimpl
def d5_custom_op_glue() -> Any:
    """The numpy glue of C++ custom operators (a pybind11 module)."""
    from d5_plugin_numpy.custom_op import NumpyCustomOpGlue

    return NumpyCustomOpGlue()
