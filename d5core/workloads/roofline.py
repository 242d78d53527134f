"""The peak floating-point rate of this machine's cores: the roofline bound for GEMM and
convolution.

It is a theoretical figure computed from the CPU's vector width, FMA units, core count
and the clock ``/proc/cpuinfo`` reports (often the base clock: a core that boosts above
it can exceed this "peak"), not a measurement, and it is labelled as such wherever it is
printed. Convolution rates count the FLOPs of a direct convolution; a backend using
Winograd or FFT does fewer, so its effective rate may exceed the peak too. Set
``D5_PEAK_GFLOPS`` to use a figure from the vendor's data sheet instead.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from d5core.environment import read_cpuinfo

__all__ = ["Peak", "cpu_peak"]


@dataclass(frozen=True)
class Peak:
    """A peak rate in GFLOP/s per dtype, and how it was obtained."""

    gflops: dict[str, float]
    source: str


def cpu_peak(cores: int | None = None) -> Peak:
    """Estimate the cores' peak GFLOP/s for float32 and float64."""
    override = os.environ.get("D5_PEAK_GFLOPS")
    if override:
        value = float(override)
        return Peak({"float32": value, "float64": value / 2}, "D5_PEAK_GFLOPS")
    info = read_cpuinfo()
    flags = set(info.get("flags", "").split())
    cores = cores or len(os.sched_getaffinity(0))
    model = info.get("model name", "")
    ghz = 0.0
    match = re.search(r"@\s*([\d.]+)\s*GHz", model)
    if match:
        ghz = float(match.group(1))
    elif info.get("cpu mhz"):
        ghz = float(info["cpu mhz"]) / 1000
    if ghz <= 0:
        return Peak({}, "unknown: no clock rate in /proc/cpuinfo; set D5_PEAK_GFLOPS")
    # AMD cores before Zen 5 (CPU family 26) execute 512-bit instructions as two
    # 256-bit halves, so only their 256-bit rate counts.
    amd_halves = info.get("vendor_id") == "AuthenticAMD" and int(info.get("cpu family", 0)) < 26
    wide = "avx512f" in flags and not amd_halves
    bits = 512 if wide else 256 if "avx" in flags else 128
    fma = 2 if "fma" in flags else 1
    units = 2  # two vector FMA pipes per core on current x86 server cores
    f32 = cores * ghz * (bits / 32) * fma * units
    how = f"{cores} cores x {ghz:.2f} GHz x {bits}-bit vectors x {units} units"
    how += " x FMA" if fma == 2 else " without FMA"
    return Peak({"float32": f32, "float64": f32 / 2}, f"estimate: {how}")
