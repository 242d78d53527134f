"""Run-time controls of the compiled module: the micro-kernel ISA, the OpenMP threads,
and facts about the build (compiler, OpenMP version, blocking sizes, FMA peak).

The ISA is the best the CPU offers unless the environment variable ``D5_NATIVE_ISA``
(``generic``, ``avx2`` or ``avx512``; ``D5_KERNELS_ISA`` is its older name) names another
when the module loads, or :func:`set_isa` chooses one later; tests force each path this
way. Every measurement records the ISA it ran with (the operators' ``details()``) and every
run the ISA chosen, the ones available and what forced it (the environment hook).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

from d5core.api import UsageError

#: The environment variables that force an ISA when the module loads (the first wins; the
#: second is its older name, and they must agree when both are set).
ISA_VARIABLES = ("D5_NATIVE_ISA", "D5_KERNELS_ISA")

#: Every ISA the module has micro-kernels for, and the CPU features each needs.
ISA_REQUIREMENTS = {
    "generic": "any x86-64",
    "avx2": "avx2 and fma",
    "avx512": "avx512f, avx512vl, avx512bw and avx512dq",
}

try:
    from d5_kernels import _native
except ImportError as exc:  # the module refuses a bad D5_NATIVE_ISA when it loads
    if not any(name in str(exc) for name in ISA_VARIABLES):
        raise
    raise UsageError(f"d5-kernels: {exc}") from None

__all__ = [
    "ISA_REQUIREMENTS",
    "ISA_VARIABLES",
    "Blocking",
    "available_isas",
    "blocking",
    "compiler",
    "forced_isa",
    "isa",
    "num_threads",
    "openmp_version",
    "peak_gflops",
    "set_isa",
    "set_num_threads",
    "using_isa",
    "why_unavailable",
]


class Blocking(NamedTuple):
    """The GEMM's register tile (``mr`` x ``nr``) and cache blocks for one ISA and dtype:
    A is packed in ``mc`` x ``kc`` blocks, B in ``kc`` x ``nc`` blocks."""

    mr: int
    nr: int
    kc: int
    mc: int
    nc: int


def isa() -> str:
    """The micro-kernels in use: ``"avx512"``, ``"avx2"`` or ``"generic"``."""
    return str(_native.isa())


def available_isas() -> list[str]:
    """The ISAs this CPU can run, best last."""
    return [str(name) for name in _native.available_isas()]


def why_unavailable(name: str) -> str | None:
    """Why this CPU cannot run the micro-kernels of ISA ``name`` (one line naming the
    features it lacks and the ISAs it runs), or ``None`` when it can."""
    runs = available_isas()
    if name in runs:
        return None
    needs = ISA_REQUIREMENTS.get(name)
    if needs is None:
        return f"d5-kernels has no ISA {name!r}; it has {', '.join(ISA_REQUIREMENTS)}"
    return (
        f"this CPU lacks {needs}: the {name} micro-kernels cannot run here "
        f"(it runs {', '.join(runs)})"
    )


def forced_isa() -> str | None:
    """What forced the ISA when the module loaded, such as ``"D5_NATIVE_ISA=avx2"``;
    ``None`` when it chose the best the CPU runs."""
    for variable in ISA_VARIABLES:
        if os.environ.get(variable):
            return f"{variable}={os.environ[variable]}"
    return None


def set_isa(name: str) -> None:
    """Use the micro-kernels of ``name`` from now on in this process."""
    try:
        _native.set_isa(name)
    except ValueError as exc:
        runs = ", ".join(available_isas())
        raise UsageError(f"d5-kernels: {exc}; this CPU runs {runs}") from None


@contextmanager
def using_isa(name: str) -> Iterator[None]:
    """Run a block with the micro-kernels of ``name``, then restore the previous ones."""
    before = isa()
    set_isa(name)
    try:
        yield
    finally:
        set_isa(before)


def num_threads() -> int:
    """The OpenMP threads the kernels use (``omp_get_max_threads``)."""
    return int(_native.num_threads())


def set_num_threads(n: int) -> None:
    """Use ``n`` OpenMP threads (``omp_set_num_threads``); ``n`` must be positive."""
    if int(n) < 1:
        raise UsageError(f"d5-kernels: the thread count must be positive, got {n}")
    _native.set_num_threads(int(n))


def compiler() -> str:
    """The compiler that built the module, such as ``"gcc 12.2.0"``."""
    return str(_native.compiler())


def openmp_version() -> int:
    """The OpenMP specification date the module was built against (``_OPENMP``)."""
    return int(_native.openmp_version())


def blocking(isa_name: str, dtype: str) -> Blocking:
    """The GEMM blocking for ``isa_name`` and ``dtype`` (``float32`` or ``float64``)."""
    try:
        found = _native.blocking(isa_name, dtype)
    except ValueError as exc:
        raise UsageError(f"d5-kernels: {exc}") from None
    return Blocking(**{k: int(v) for k, v in found.items()})


def peak_gflops(isa_name: str | None = None, dtype: str = "float32", seconds: float = 0.2) -> float:
    """One core's measured FMA throughput in GFLOP/s with ``isa_name``'s widest FMA
    (default: the ISA in use): independent multiply-add chains, timed for ``seconds``.
    It is the roof the GEMM is measured against."""
    try:
        return float(_native.peak_gflops(isa_name or isa(), dtype, float(seconds)))
    except ValueError as exc:
        raise UsageError(f"d5-kernels: {exc}") from None
