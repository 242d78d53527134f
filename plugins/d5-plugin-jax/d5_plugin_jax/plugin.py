"""The plugin module of d5-plugin-jax.

Nothing here imports JAX: listing plugins, recording the environment and checking the
machine's fitness must not pay for it. Hooks that report on JAX's state answer fully
only once the measured work has imported it (through :mod:`d5_plugin_jax._jax`);
``d5_plugin_check`` is the one hook that imports it, to run a product.

JAX dispatches asynchronously, on the CPU too: its operators are marked
``asynchronous``, and :func:`d5_synchronize` waits for the outputs of the last timed
call (``jax.block_until_ready``), so that the measurement engine reads its clock only
once the work is done.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from importlib import metadata
from typing import Any

from d5_plugin_jax import _jax
from d5core.api import hookimpl

__all__ = [
    "d5_environment_info",
    "d5_plugin_api",
    "d5_plugin_check",
    "d5_synchronize",
    "d5_thread_settings",
]

d5_plugin_api = ">=1.7,<2"

#: The distributions whose versions are recorded with every run.
_DISTRIBUTIONS = ("jax", "jaxlib", "optax")


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _loaded() -> Any:
    """jax, if the measured work already imported it; never import it for a hook."""
    module = sys.modules.get("jax")
    return module if module is not None and hasattr(module, "devices") else None


@hookimpl
def d5_environment_info() -> Mapping[str, Any]:
    info: dict[str, Any] = {name: _version(name) for name in _DISTRIBUTIONS}
    module = _loaded()
    info["imported"] = module is not None
    if module is None:
        info["xla_flags"] = os.environ.get("XLA_FLAGS", "")
        return info
    info["backend"] = module.default_backend()
    info["devices"] = [str(d) for d in module.devices()]
    info.update(_jax.settings() or {})
    return info


@hookimpl
def d5_thread_settings() -> Mapping[str, str] | None:
    found = _jax.settings()
    if found is None:
        return None
    return {_jax.THREAD_SETTING: str(found["intra_op_parallelism_threads"])}


@hookimpl
def d5_synchronize(device: str) -> None:
    """Wait for the outputs of the last timed JAX call (JAX's CPU and accelerator
    clients both dispatch asynchronously)."""
    _jax.synchronize()


@hookimpl
def d5_plugin_check() -> list[str]:
    try:
        jax = _jax.jax()
        import numpy as np

        x = jax.numpy.arange(6, dtype="float32").reshape(2, 3)
        got = np.asarray(jax.jit(lambda a: a @ a.T)(x)).tolist()
    except Exception as exc:
        return [f"cannot run jax ({exc}); pip install jax==0.10.2 jaxlib==0.10.2"]
    if got != [[5.0, 14.0], [14.0, 50.0]]:
        return [f"jax {jax.__version__} computed a wrong 2x3 matrix product"]
    return []
