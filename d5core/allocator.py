"""How the C allocator hands out and returns memory: a recorded setting of every run.

Frameworks on the CPU (PyTorch, TensorFlow, numpy) allocate their tensors with the C
library's ``malloc``. glibc serves a large block with ``mmap`` or grows its heap, and gives
memory back to the kernel when enough of the heap's top is free; how much depends on a
threshold it moves by itself as blocks come and go. A network that frees and allocates
megabytes per call can then take fresh pages, and a minor page fault for each of them,
on every call. On the project's machine that was more than half of the time of a
resnet20 batch-32 forward pass in PyTorch (22 ms against 10 ms), and how many faults a
call takes changed with the order in which the same tensors were freed: two programs
computing the same thing in the same framework differed by 20% for that reason alone.

d5 therefore fixes the allocator's policy before anything is measured, in every process
that measures (:func:`apply_allocator_policy`), and records it with the run
(:func:`allocator_settings`, stored under ``allocator`` in the environment, which
comparisons check). The policy is chosen with :data:`ALLOCATOR_VAR`:

- ``steady`` (the default): on glibc, blocks up to :data:`STEADY_MMAP_THRESHOLD` come
  from the heap, and the heap keeps up to :data:`STEADY_TRIM_THRESHOLD` of free memory at
  its top (``mallopt`` with ``M_MMAP_THRESHOLD`` and ``M_TRIM_THRESHOLD``). Memory freed
  in one call is reused by the next, as a framework's caching allocator would.
- ``system``: the C library's own behaviour, untouched.

When the user already chose (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_`` or
``GLIBC_TUNABLES`` naming ``glibc.malloc``, or another allocator in ``LD_PRELOAD`` such
as jemalloc or tcmalloc), d5 leaves the allocator alone and records that choice as the
policy ``user``. On a C library other than glibc nothing is changed either.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Mapping
from typing import Any

from d5core.errors import UsageError

__all__ = [
    "ALLOCATOR_POLICIES",
    "ALLOCATOR_VAR",
    "FAULT_COST_S",
    "FAULT_SHARE_LIMIT",
    "STEADY_MMAP_THRESHOLD",
    "STEADY_TRIM_THRESHOLD",
    "allocator_settings",
    "apply_allocator_policy",
    "page_fault_warning",
    "page_faults",
    "requested_policy",
]

#: The environment variable that chooses the policy.
ALLOCATOR_VAR = "D5_ALLOCATOR"
#: The policies :data:`ALLOCATOR_VAR` accepts; the first is the default.
ALLOCATOR_POLICIES: tuple[str, ...] = ("steady", "system")
#: Blocks up to this size come from the heap under ``steady`` (glibc accepts up to
#: 32 MiB everywhere, more on recent versions; the largest it accepts is used).
STEADY_MMAP_THRESHOLD = 64 * 1024 * 1024
_FALLBACK_MMAP_THRESHOLD = 32 * 1024 * 1024
#: Free memory the heap keeps at its top under ``steady`` before giving it back.
STEADY_TRIM_THRESHOLD = 1024 * 1024 * 1024

#: A lower bound of what one minor page fault costs (zeroing a 4 KiB page and the trap),
#: used to judge whether a timing is mostly page faults. On the project's machine a fault
#: cost about 1.2 µs; 0.25 µs keeps the warning for the cases that matter.
FAULT_COST_S = 0.25e-6
#: The share of the median time that page faults may take, at :data:`FAULT_COST_S`
#: each, before a run is warned about.
FAULT_SHARE_LIMIT = 0.02

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: Variables through which a user configures glibc's malloc themselves.
_USER_MALLOC_VARS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_",
                     "MALLOC_MMAP_MAX_", "MALLOC_ARENA_MAX")  # fmt: skip

#: What :func:`apply_allocator_policy` did in this process (``None``: not called yet).
_applied: dict[str, Any] | None = None


def requested_policy(environ: Mapping[str, str] | None = None) -> str:
    """The policy :data:`ALLOCATOR_VAR` asks for (``steady`` when unset or empty).

    :raises UsageError: for a value that is no policy, naming the accepted ones.
    """
    env = os.environ if environ is None else environ
    value = env.get(ALLOCATOR_VAR, "").strip().lower()
    if not value:
        return ALLOCATOR_POLICIES[0]
    if value not in ALLOCATOR_POLICIES:
        raise UsageError(
            f"{ALLOCATOR_VAR}={env[ALLOCATOR_VAR]!r} is not an allocator policy; use "
            f"{' or '.join(ALLOCATOR_POLICIES)} (or unset it for steady)"
        )
    return value


def _glibc_version() -> str | None:
    try:
        libc = ctypes.CDLL(None)
        version = libc.gnu_get_libc_version
    except (OSError, AttributeError):
        return None
    version.restype = ctypes.c_char_p
    raw = version()
    return raw.decode() if isinstance(raw, bytes) else None


def _preloaded(environ: Mapping[str, str]) -> list[str]:
    return [p for p in environ.get("LD_PRELOAD", "").replace(":", " ").split() if p]


def _user_choice(environ: Mapping[str, str]) -> dict[str, str]:
    """The allocator settings the user made through the environment, by variable."""
    chosen = {var: environ[var] for var in _USER_MALLOC_VARS if environ.get(var)}
    tunables = environ.get("GLIBC_TUNABLES", "")
    if "glibc.malloc" in tunables:
        chosen["GLIBC_TUNABLES"] = tunables
    allocators = [p for p in _preloaded(environ) if "malloc" in os.path.basename(p)]
    if allocators:
        chosen["LD_PRELOAD"] = " ".join(allocators)
    return chosen


def _library(environ: Mapping[str, str]) -> str:
    preloaded = [p for p in _preloaded(environ) if "malloc" in os.path.basename(p)]
    if preloaded:
        return os.path.basename(preloaded[0])
    version = _glibc_version()
    return f"glibc {version}" if version else "unknown"


def apply_allocator_policy(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Set the allocator policy of this process once; later calls return the first result.

    Called before anything is measured: by the ``d5`` command, by each measuring worker
    process and by :func:`~d5core.measure.engine.measure`. Blocks already allocated
    keep where they came from; only later allocations follow the policy.

    :return: :func:`allocator_settings`.
    :raises UsageError: when :data:`ALLOCATOR_VAR` names no policy.
    """
    global _applied
    if _applied is not None:
        return dict(_applied)
    env = os.environ if environ is None else environ
    policy = requested_policy(env)
    settings: dict[str, Any] = {"policy": policy, "library": _library(env)}
    user = _user_choice(env)
    if user:
        settings.update(policy="user", requested=policy, user=user)
    elif policy == "steady":
        if not settings["library"].startswith("glibc"):
            settings.update(policy="system", requested=policy,
                            reason="steady needs glibc's mallopt")  # fmt: skip
        else:
            libc = ctypes.CDLL(None)
            mmap_threshold = STEADY_MMAP_THRESHOLD
            if not libc.mallopt(_M_MMAP_THRESHOLD, mmap_threshold):
                mmap_threshold = _FALLBACK_MMAP_THRESHOLD
                libc.mallopt(_M_MMAP_THRESHOLD, mmap_threshold)
            libc.mallopt(_M_TRIM_THRESHOLD, STEADY_TRIM_THRESHOLD)
            settings.update(mmap_threshold=mmap_threshold, trim_threshold=STEADY_TRIM_THRESHOLD)
    _applied = settings
    return dict(settings)


def allocator_settings() -> dict[str, Any]:
    """The allocator policy in force in this process, for the run's environment.

    ``policy`` is ``steady``, ``system`` or ``user`` (with ``user``: the variables the
    user set), ``library`` the allocator (``glibc 2.36``, ``libjemalloc.so.2``, ...), and
    under ``steady`` the two thresholds set. Before :func:`apply_allocator_policy` ran,
    the policy is ``system`` and ``applied`` is false.
    """
    if _applied is not None:
        return {**_applied, "applied": True}
    env = os.environ
    settings: dict[str, Any] = {"policy": "system", "library": _library(env), "applied": False}
    user = _user_choice(env)
    if user:
        settings.update(policy="user", user=user)
    return settings


def page_faults() -> int:
    """Page faults (minor plus major) of this process so far, over every thread; ``-1``
    where the platform does not count them (Windows)."""
    if sys.platform == "win32":
        return -1
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return int(usage.ru_minflt + usage.ru_majflt)


def page_fault_warning(label: str, faults_per_call: float | None, median_s: float) -> str | None:
    """The warning for a timing of which page faults may take a noticeable share, else
    ``None``.

    At :data:`FAULT_COST_S` per fault, the faults of a call must exceed
    :data:`FAULT_SHARE_LIMIT` of its median for a warning: the number then measures the
    kernel handing out memory as well as the code.
    """
    if faults_per_call is None or median_s <= 0 or faults_per_call < 1:
        return None
    share = faults_per_call * FAULT_COST_S / median_s
    if share < FAULT_SHARE_LIMIT:
        return None
    policy = allocator_settings()["policy"]
    advice = (
        f"unset {ALLOCATOR_VAR} for the steady policy"
        if policy == "system"
        else "the calls allocate memory they never reuse"
        if policy == "steady"
        else "the allocator settings in the environment decide this"
    )
    return (
        f"{label}: {faults_per_call:.0f} page faults per call, at least "
        f"{100 * share:.0f}% of its median time (allocator policy {policy}; {advice})"
    )
