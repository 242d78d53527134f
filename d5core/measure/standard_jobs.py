"""Standard workloads for worker processes: what ``d5 calibrate`` measures, and a control.

Each function takes a job's arguments and returns the zero-argument callable to time,
with its inputs already made (see :mod:`d5core.measure.invocations`). They need numpy
only, so they run wherever d5's core does:

- :func:`gemm`: compute bound, a dense matrix product through the BLAS;
- :func:`copy`: memory bound, a copy of an array far larger than the caches;
- :func:`pyloop`: interpreter bound, a pure-Python loop;
- :func:`spin`: a busy-wait of a fixed time, whose cost depends only on the clock and on
  whether the process is on a core (a control for tests and experiments).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

__all__ = ["copy", "gemm", "pyloop", "spin"]


def _positive(name: str, value: float) -> None:
    if not value > 0:
        raise ValueError(f"{name} must be positive, got {value!r}")


def gemm(n: int = 256, dtype: str = "float64", seed: int = 0) -> Callable[[], object]:
    """``C = A @ B`` for ``n``×``n`` matrices of ``dtype`` (written into a kept ``C``)."""
    _positive("n", n)
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, n)).astype(dtype)
    b = rng.standard_normal((n, n)).astype(dtype)
    c = np.empty((n, n), dtype=dtype)

    def run() -> object:
        return np.matmul(a, b, out=c)

    return run


def copy(mib: float = 64.0) -> Callable[[], object]:
    """Copy an array of ``mib`` MiB into another (both touched before timing)."""
    _positive("mib", mib)
    count = max(1, int(mib * (1 << 20)) // 8)
    src = np.ones(count, dtype=np.float64)
    dst = np.zeros_like(src)

    def run() -> object:
        np.copyto(dst, src)
        return dst

    return run


def pyloop(iterations: int = 100_000) -> Callable[[], object]:
    """Sum the integers below ``iterations`` in a Python ``for`` loop."""
    _positive("iterations", iterations)
    count = range(int(iterations))

    def run() -> object:
        total = 0
        for i in count:
            total += i
        return total

    return run


def spin(seconds: float = 1e-3) -> Callable[[], object]:
    """Busy-wait ``seconds`` on the performance counter."""
    _positive("seconds", seconds)
    clock = time.perf_counter

    def run() -> object:
        end = clock() + seconds
        while clock() < end:
            pass
        return None

    return run
