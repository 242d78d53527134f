"""The plugin module of d5-plugin-numpy: its hooks and plugin-API range."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from d5core.api import hookimpl

d5_plugin_api = ">=1.7,<2"


@hookimpl
def d5_environment_info() -> Mapping[str, Any]:
    import numpy as np

    info: dict[str, Any] = {"numpy": np.__version__}
    try:
        config = np.show_config(mode="dicts")
        blas = config.get("Build Dependencies", {}).get("blas", {})
        info["blas"] = {k: blas.get(k) for k in ("name", "version", "openblas configuration")}
    except TypeError:  # numpy before 1.25 has no mode="dicts"
        info["blas"] = _legacy_blas(np)
    except Exception:
        info["blas"] = None
    return info


def _legacy_blas(np: Any) -> dict[str, Any] | None:
    """The BLAS of a numpy before 1.25 (numpy 1.23 beside MXNet): the library its build
    config names, and the version of the one it loaded, as threadpoolctl finds it (when
    installed) in numpy's own library folder."""
    found = None
    for key in ("blas_ilp64_opt_info", "blas_opt_info"):
        built = getattr(np.__config__, key, None)
        if isinstance(built, dict) and built.get("libraries"):
            found = {"name": built["libraries"][0], "version": None, "openblas configuration": None}
            break
    if found is None:
        return None
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return found
    for lib in threadpool_info():
        if lib.get("user_api") == "blas" and "numpy" in str(lib.get("filepath", "")):
            found["version"] = lib.get("version")
            found["openblas configuration"] = (
                f"{lib.get('internal_api')} {lib.get('version')} {lib.get('architecture')}"
            )
            break
    return found


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
