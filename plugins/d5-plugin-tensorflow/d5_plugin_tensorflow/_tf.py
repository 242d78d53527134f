"""The one place TensorFlow is imported and set up, before its first op runs.

Every module of the plugin that needs TensorFlow calls :func:`tensorflow` (never a bare
``import tensorflow``), so that the process-wide settings below are made once, before
TensorFlow creates its thread pools, whichever component is used first:

- **threads**: intra-op parallelism is d5's thread count (:func:`thread_count`: a
  positive ``OMP_NUM_THREADS``, else the cores this process may run on), the rule the
  onnxruntime plugin follows too; inter-op parallelism is 1, so a graph runs its ops one
  after the other, as torch and onnxruntime (sequential mode) do. TensorFlow accepts
  these only before its first op; if something else ran an op first, the settings it
  got are reported as they are (:func:`settings`), never silently assumed;
- **determinism**: ``tf.config.experimental.enable_op_determinism()``, so that two runs
  with the same seed give the same results (TensorFlow then refuses the few ops that
  have no deterministic kernel, with an error naming them);
- **logging**: TensorFlow's C++ start-up messages are silenced
  (``TF_CPP_MIN_LOG_LEVEL=2`` unless set), so a d5 command prints d5's output only.
  TensorFlow 2.21 writes its oneDNN notice to the standard error file descriptor before
  that setting is read, so the import runs with that descriptor pointed at ``/dev/null``
  (a failed import still raises, with its message, once the descriptor is restored).
  ``D5_TF_VERBOSE=1`` keeps TensorFlow's messages.
"""

from __future__ import annotations

import os
import sys
from typing import Any

__all__ = ["settings", "tensorflow", "thread_count"]

_configured: dict[str, Any] | None = None


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


def tensorflow() -> Any:
    """The ``tensorflow`` module, set up as the module docstring says (once)."""
    global _configured
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if "tensorflow" in sys.modules or os.environ.get("D5_TF_VERBOSE") == "1":
        import tensorflow as tf
    else:
        tf = _import_quietly()

    if _configured is None:
        wanted = thread_count()
        applied = True
        try:
            tf.config.threading.set_intra_op_parallelism_threads(wanted)
            tf.config.threading.set_inter_op_parallelism_threads(1)
        except RuntimeError:  # TensorFlow already ran an op: its pools are fixed
            applied = False
        tf.config.experimental.enable_op_determinism()
        _configured = {"wanted_intra_op": wanted, "applied": applied}
    return tf


def _import_quietly() -> Any:
    """``import tensorflow`` with the standard error descriptor sent to ``/dev/null``."""
    try:
        sys.stderr.flush()
        saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    except OSError:  # no descriptor 2 to redirect (an embedded interpreter)
        import tensorflow as tf

        return tf
    try:
        os.dup2(devnull, 2)
        import tensorflow as tf
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
    return tf


def settings() -> dict[str, Any] | None:
    """TensorFlow's thread pools and determinism as they are now, or ``None`` when the
    process has not imported TensorFlow (this never imports it).

    A pool size of 0 means TensorFlow chooses (all cores).
    """
    tf = sys.modules.get("tensorflow")
    if tf is None or not hasattr(tf, "config"):
        return None
    out: dict[str, Any] = {
        "intra_op_parallelism_threads": tf.config.threading.get_intra_op_parallelism_threads(),
        "inter_op_parallelism_threads": tf.config.threading.get_inter_op_parallelism_threads(),
    }
    if _configured is not None:
        out["set_by_d5"] = bool(_configured["applied"])
        out["op_determinism"] = True
    return out
