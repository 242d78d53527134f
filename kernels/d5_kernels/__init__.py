"""d5-kernels: d5's native C++ operator backend.

A packed, register-blocked GEMM in the manner of BLIS (AVX-512, AVX2 or portable
micro-kernels chosen at run time, OpenMP threads over the output) and the operators built
on it, registered as the ``native`` backend of the ``d5.operators`` group. This module
exposes the run-time controls: which micro-kernel runs (:func:`isa`, :func:`set_isa`) and
how many OpenMP threads (:func:`num_threads`, :func:`set_num_threads`).
"""

from d5_kernels.runtime import (
    Blocking,
    available_isas,
    blocking,
    compiler,
    forced_isa,
    isa,
    num_threads,
    openmp_version,
    peak_gflops,
    set_isa,
    set_num_threads,
    using_isa,
    why_unavailable,
)

__version__ = "0.1.0"

__all__ = [
    "Blocking",
    "__version__",
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
