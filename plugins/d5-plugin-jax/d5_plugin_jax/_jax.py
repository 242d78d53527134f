"""The one place JAX is imported and set up, before XLA starts its CPU client.

Every module of the plugin that needs JAX calls :func:`jax` (never a bare ``import
jax``), so that what XLA reads once at start-up is in place whichever component runs
first:

- **threads**: XLA's CPU client sizes its intra-op pool from the ``XLA_FLAGS``
  environment variable when it starts (on the first computation, not at ``import
  jax``). Before that, :func:`jax` adds ``intra_op_parallelism_threads=N`` with d5's
  thread count ``N`` (:func:`thread_count`: a positive ``OMP_NUM_THREADS``, else the cores
  this process may run on; the rule of the TensorFlow, MXNet and onnxruntime plugins) and
  ``--xla_cpu_multi_thread_eigen`` (``false`` for ``N = 1``: Eigen's kernels then run on
  the calling thread; ``true`` otherwise). A flag the user already put in ``XLA_FLAGS``
  is kept as it is (:func:`xla_flags_for`). If something else started XLA first, the
  flags it got are reported as they are (:func:`settings`: ``set_by_d5`` false), never
  silently assumed;
- **float64**: JAX computes in 32 bits unless its x64 mode is on, a process-wide switch
  that other plugins sharing the process must not see. :func:`x64` turns it on for one
  block only (``jax.enable_x64``, a context manager scoped to the calling thread);
  :func:`require_x64` refuses, in one line, a float64 computation on a JAX that cannot.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from d5core.api import UsageError

__all__ = [
    "PENDING",
    "THREAD_SETTING",
    "jax",
    "require_x64",
    "settings",
    "synchronize",
    "thread_count",
    "x64",
    "xla_flags_for",
]

#: The name under which the intra-op thread count is reported (``d5_thread_settings``).
THREAD_SETTING = "jax.intra_op_parallelism_threads"

#: The XLA flag that sizes the CPU client's intra-op pool.
_INTRA_OP = "intra_op_parallelism_threads"
#: The XLA flag that lets Eigen's kernels use their own thread pool.
_EIGEN = "--xla_cpu_multi_thread_eigen"

_configured: dict[str, Any] | None = None

#: The outputs of the last timed call, which :func:`synchronize` waits for (one slot,
#: so that a timed call pays one store and keeps no more than its own outputs alive).
PENDING: list[Any] = [None]


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


def _flag_name(token: str) -> str:
    return token.split("=", 1)[0].lstrip("-")


def xla_flags_for(threads: int, given: str = "") -> tuple[str, list[str]]:
    """``XLA_FLAGS`` with d5's thread settings added to the flags ``given``, and the
    flags added. A flag already in ``given`` is kept, and not added again.

    XLA reads a value that does not start with ``--`` as the name of a file of flags,
    and ``intra_op_parallelism_threads`` is written without dashes (a ``--`` spelling is
    refused as unknown): so a ``--`` flag (``--xla_cpu_multi_thread_eigen``) comes first,
    and a ``given`` that names a file is left alone.
    """
    tokens = given.split()
    if tokens and not tokens[0].startswith("--"):
        return given, []
    present = {_flag_name(t) for t in tokens}
    first: list[str] = []
    last: list[str] = []
    if _flag_name(_EIGEN) not in present:
        first.append(f"{_EIGEN}={'true' if threads > 1 else 'false'}")
    if _INTRA_OP not in present:
        last.append(f"{_INTRA_OP}={threads}")
    return " ".join([*first, *tokens, *last]), [*first, *last]


def _flag_value(flags: str, name: str) -> str | None:
    for token in flags.split():
        if _flag_name(token) == name and "=" in token:
            return token.split("=", 1)[1]
    return None


def _backend_started() -> bool:
    """Whether XLA's client already started in this process (its flags are then fixed)."""
    bridge = sys.modules.get("jax._src.xla_bridge")
    started = getattr(bridge, "backends_are_initialized", None)
    return bool(started()) if callable(started) else False


def jax() -> Any:
    """The ``jax`` module, set up as the module docstring says (once)."""
    global _configured
    if _configured is None:
        wanted = thread_count()
        if _backend_started():
            _configured = {"wanted": wanted, "added": [], "applied": False}
        else:
            flags, added = xla_flags_for(wanted, os.environ.get("XLA_FLAGS", ""))
            os.environ["XLA_FLAGS"] = flags
            _configured = {"wanted": wanted, "added": added, "applied": True}
        # JAX warns at every fork of a process it runs threads in. A subprocess
        # (fork, then exec at once: d5's workers, launchers and probes) runs none of the
        # parent's threads, so that warning is noise there; any other fork still warns.
        warnings.filterwarnings(
            "ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning,
            module="subprocess",
        )  # fmt: skip
    import jax as module

    return module


def settings() -> dict[str, Any] | None:
    """JAX's thread settings as XLA got them, or ``None`` when the process has not
    imported JAX (this never imports it).

    ``intra_op_parallelism_threads`` is the value in ``XLA_FLAGS`` (``0``: not given, so
    XLA chooses: one thread per core); ``set_by_d5`` whether d5 put its thread count
    there before XLA started; ``x64_default`` whether x64 mode is on outside d5's blocks.
    """
    module = sys.modules.get("jax")
    if module is None or not hasattr(module, "config"):
        return None
    flags = os.environ.get("XLA_FLAGS", "")
    out: dict[str, Any] = {
        "xla_flags": flags,
        "intra_op_parallelism_threads": int(_flag_value(flags, _INTRA_OP) or 0),
        "x64_default": bool(module.config.jax_enable_x64),
    }
    if _configured is not None:
        out["set_by_d5"] = bool(_configured["applied"]) and bool(_configured["added"])
        out["wanted_threads"] = int(_configured["wanted"])
    return out


def synchronize() -> None:
    """Wait until the outputs of the last timed call are computed (JAX dispatches
    asynchronously), then forget them; nothing when JAX is not imported."""
    module = sys.modules.get("jax")
    pending, PENDING[0] = PENDING[0], None
    if module is not None and pending is not None:
        module.block_until_ready(pending)


def _x64_is_on(module: Any) -> bool:
    import numpy as np

    return bool(module.dtypes.canonicalize_dtype(np.float64) == np.dtype(np.float64))


def require_x64(what: str = "float64") -> None:
    """Raise a one-line ``UsageError`` when JAX's x64 mode cannot be turned on here
    (``what`` names the computation that needs it)."""
    with x64(what=what):
        pass


@contextmanager
def x64(enabled: bool = True, *, what: str = "float64") -> Iterator[None]:
    """A block in which JAX computes in 64 bits (``enabled``), leaving the process's
    setting as it was afterwards; a one-line ``UsageError`` when this JAX refuses."""
    module = jax()
    if not enabled:
        yield
        return
    switch = getattr(module, "enable_x64", None)
    reason = "jax.enable_x64 is missing" if switch is None else ""
    if switch is not None:
        with switch(True):
            if _x64_is_on(module):
                yield
                return
        reason = "float64 stays float32 under jax.enable_x64"
    raise UsageError(
        f"{what} needs JAX's x64 mode, which this build/process does not allow ({reason}); "
        f"use float32, or a jax {getattr(module, '__version__', '?')} build with x64"
    )
