"""The peak floating-point rate of this machine's cores: the roofline bound for GEMM and
convolution.

It is a theoretical figure computed from the CPU's vector width, FMA units, core count
and clock, not a measurement, and it is labelled as such wherever it is printed. Set
``D5_PEAK_GFLOPS`` to use a figure from the vendor's data sheet instead.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Peak", "cpu_peak"]


@dataclass(frozen=True)
class Peak:
    """A peak rate in GFLOP/s per dtype, and how it was obtained."""

    gflops: dict[str, float]
    source: str


def _cpuinfo() -> dict[str, str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    info: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        info.setdefault(key.strip(), value.strip())
    return info


def cpu_peak(cores: int | None = None) -> Peak:
    """Estimate the cores' peak GFLOP/s for float32 and float64."""
    override = os.environ.get("D5_PEAK_GFLOPS")
    if override:
        value = float(override)
        return Peak({"float32": value, "float64": value / 2}, "D5_PEAK_GFLOPS")
    info = _cpuinfo()
    flags = set(info.get("flags", "").split())
    cores = cores or len(os.sched_getaffinity(0))
    model = info.get("model name", "")
    ghz = 0.0
    match = re.search(r"@\s*([\d.]+)\s*GHz", model)
    if match:
        ghz = float(match.group(1))
    elif info.get("cpu MHz"):
        ghz = float(info["cpu MHz"]) / 1000
    if ghz <= 0:
        return Peak({}, "unknown: no clock rate in /proc/cpuinfo; set D5_PEAK_GFLOPS")
    # AMD cores before Zen 5 execute 512-bit instructions as two 256-bit halves.
    wide = "avx512f" in flags and "AMD" not in info.get(
        "vendor_id", "AuthenticAMD" if "AMD" in model else ""
    )
    bits = 512 if wide else 256 if "avx" in flags else 128
    fma = 2 if "fma" in flags else 1
    units = 2  # two vector FMA pipes per core on current x86 server cores
    f32 = cores * ghz * (bits / 32) * fma * units
    how = f"{cores} cores x {ghz:.2f} GHz x {bits}-bit vectors x {units} units"
    how += " x FMA" if fma == 2 else " without FMA"
    return Peak({"float32": f32, "float64": f32 / 2}, f"estimate: {how}")
