"""The peak floating-point rate of this machine's cores: the roofline bound for GEMM and
convolution.

The peak is, in order:

1. ``D5_PEAK_GFLOPS`` (float32 GFLOP/s, for example from the vendor's data sheet); it
   must be a positive number;
2. measured: a calibrated loop of independent vector FMAs, as wide as the CPU's vectors,
   on every core this process may use at once. It runs at the clock the cores really
   reach (boost included, which ``/proc/cpuinfo`` does not show: a virtual machine
   reports its base clock), once per machine: the result is cached under the user's cache
   directory (``$XDG_CACHE_HOME/d5`` or ``~/.cache/d5``), keyed by CPU model, flags and
   core count. The loop is C, compiled with the system's C compiler (``$CC``, ``cc``,
   ``gcc`` or ``clang``). A measurement taken while the machine is busy (load average
   above half the cores) is not cached, and is never used below the estimate;
3. estimated, where no C compiler is found: cores x clock x vector width x FMA units,
   from ``/proc/cpuinfo``. Its clock is often the base clock, so a core that boosts
   above it can exceed this "peak"; it is labelled as an estimate wherever it is shown.

A :class:`Peak` knows the cores it counts, so that a backend that ran on fewer threads is
judged against the peak of those cores only (:meth:`Peak.of_threads`).

Convolution rates count the FLOPs of a direct convolution; a backend using Winograd or
FFT does fewer, so its effective rate may exceed even a measured peak.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from d5core.environment import read_cpuinfo
from d5core.overrides import is_positive_number, number_from_env

__all__ = [
    "PEAK_ENV_VAR",
    "Peak",
    "c_compiler",
    "cache_dir",
    "cache_path",
    "cached_value",
    "compile_shared",
    "cpu_peak",
    "estimate_peak",
    "machine_busy",
    "machine_key",
    "measure_peak",
    "peak_override",
    "read_cache",
    "usable_cores",
    "write_cache",
]

#: The environment variable that sets the float32 peak in GFLOP/s.
PEAK_ENV_VAR = "D5_PEAK_GFLOPS"
#: Seconds each timed trial of the FMA loop runs for, and how many trials are taken.
_TRIAL_S = 0.1
_TRIALS = 5

_FMA_SOURCE = r"""
#if defined(__AVX512F__)
#define D5_BYTES 64
#define D5_ACC 16
#elif defined(__AVX__)
#define D5_BYTES 32
#define D5_ACC 12
#elif defined(__aarch64__)
#define D5_BYTES 16
#define D5_ACC 16
#else
#define D5_BYTES 16
#define D5_ACC 12
#endif
typedef float d5v __attribute__((vector_size(D5_BYTES)));
int d5_flops_per_iteration(void) { return 2 * D5_ACC * (D5_BYTES / (int)sizeof(float)); }
int d5_vector_bits(void) { return 8 * D5_BYTES; }
float d5_fma(long iterations, float seed) {
    d5v acc[D5_ACC];
    d5v mul, add;
    for (int j = 0; j < D5_BYTES / 4; j++) { mul[j] = 0.999999f; add[j] = seed; }
    for (int i = 0; i < D5_ACC; i++) acc[i] = add * (float)(i + 1);
    for (long n = 0; n < iterations; n++) {
        for (int i = 0; i < D5_ACC; i++) acc[i] = acc[i] * mul + add;
    }
    float total = 0.0f;
    for (int i = 0; i < D5_ACC; i++)
        for (int j = 0; j < D5_BYTES / 4; j++) total += acc[i][j];
    return total;
}
"""


@dataclass(frozen=True)
class Peak:
    """A peak rate in GFLOP/s per dtype, how it was obtained, and the cores it counts
    (the threads of the measured loop; the usable cores for an override or estimate)."""

    gflops: dict[str, float]
    source: str
    cores: int = 1

    def per_core(self, dtype: str) -> float | None:
        """One core's share of the peak for ``dtype``; ``None`` where it is unknown."""
        rate = self.gflops.get(dtype)
        return rate / max(1, self.cores) if rate else None

    def of_threads(self, dtype: str, threads: int | None) -> float | None:
        """The peak of ``threads`` cores (at most all of them): what a backend that ran
        on that many threads can reach. Unknown ``threads``: the whole machine's peak."""
        per_core = self.per_core(dtype)
        if per_core is None or not threads or threads < 1 or threads >= self.cores:
            return self.gflops.get(dtype)
        return per_core * threads


def _rates(float32: float) -> dict[str, float]:
    return {"float32": float32, "float64": float32 / 2}


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity), at least 1."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def peak_override() -> Peak | None:
    """The peak ``D5_PEAK_GFLOPS`` sets, or ``None`` where it is unset or empty.

    :raises UsageError: when it is not a positive, finite number.
    """
    value = number_from_env(
        PEAK_ENV_VAR,
        must_be="a positive number of float32 GFLOP/s",
        unset_to="measure this machine's peak",
    )
    return None if value is None else Peak(_rates(value), PEAK_ENV_VAR, usable_cores())


def cpu_peak() -> Peak:
    """The cores' peak GFLOP/s for float32 and float64 (see the module docstring).

    :raises UsageError: for a malformed ``D5_PEAK_GFLOPS``.
    """
    override = peak_override()
    if override is not None:
        return override
    return _machine_peak()


@functools.lru_cache(maxsize=1)
def _machine_peak() -> Peak:
    """The measured (or cached) peak, else the estimate; once per process."""
    path = cache_path()
    key = machine_key()
    cached = cached_value(path, key, "float32")
    if cached is not None:
        return Peak(_rates(cached[0]), cached[1], _cached_cores(path, key))
    estimate = estimate_peak()
    busy = machine_busy()
    measured = measure_peak()
    if measured is None:
        return Peak(
            estimate.gflops, f"{estimate.source} (no C compiler to measure it)", estimate.cores
        )
    float32 = measured.gflops["float32"]
    if not busy:
        entry = {"float32": float32, "how": measured.source, "cores": measured.cores}
        write_cache(path, key, entry)
        return measured
    if float32 >= estimate.gflops.get("float32", 0.0):
        return Peak(measured.gflops, f"{measured.source} under load (not cached)", measured.cores)
    return Peak(
        estimate.gflops,
        f"{estimate.source}; the FMA loop reached only {float32:.0f} GFLOP/s under load "
        f"(not cached)",
        estimate.cores,
    )


def _cached_cores(path: Path, key: str) -> int:
    """The cores a cached peak was measured on: stored beside it, else (a cache written
    before d5 stored them) the usable cores, whose count is part of the machine's key."""
    entry = read_cache(path).get(key)
    cores = entry.get("cores") if isinstance(entry, dict) else None
    return cores if isinstance(cores, int) and cores > 0 else usable_cores()


def cached_value(path: Path, key: str, name: str) -> tuple[float, str] | None:
    """The positive number ``name`` cached for the machine ``key`` in ``path`` (see
    :func:`write_cache`) and how it was obtained (``"<how>, cached in <path>"``), or
    ``None`` where nothing usable is cached."""
    cached = read_cache(path).get(key)
    if not isinstance(cached, dict) or not is_positive_number(cached.get(name)):
        return None
    return float(cached[name]), f"{cached.get('how', 'measured')}, cached in {path}"


def machine_busy() -> bool:
    """Whether the 1-minute load average is above half the usable cores: a measurement of
    the machine taken now may be used, but is not cached."""
    return os.getloadavg()[0] > usable_cores() / 2


def cache_dir() -> Path:
    """Where d5 keeps what it measured of this machine: ``$XDG_CACHE_HOME/d5`` (when
    absolute), else ``~/.cache/d5``."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "d5"


def cache_path() -> Path:
    """Where measured peaks are kept: ``peak.json`` in :func:`cache_dir`."""
    return cache_dir() / "peak.json"


def machine_key() -> str:
    """What identifies this machine's cores: CPU model, family, flags and core count."""
    info = read_cpuinfo()
    parts = [
        info.get("model name") or info.get("hardware") or os.uname().machine,
        info.get("vendor_id", ""),
        info.get("cpu family", ""),
        info.get("model", ""),
        info.get("flags") or info.get("features") or "",
        str(usable_cores()),
    ]
    digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    return f"{parts[0]} x{parts[-1]} {digest}"


def read_cache(path: Path) -> dict[str, object]:
    """The JSON object cached in ``path``; empty where it is missing or unreadable."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_cache(path: Path, key: str, entry: dict[str, object]) -> None:
    """Add ``entry`` under ``key`` of the JSON object in ``path``; a cache that cannot be
    written is skipped silently (the figure is measured again next time)."""
    data = read_cache(path)
    data[key] = entry
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        tmp.replace(path)
    except OSError:
        pass


def c_compiler() -> str | None:
    """The system's C compiler (``$CC``, ``cc``, ``gcc`` or ``clang``), or ``None``."""
    for name in (os.environ.get("CC", ""), "cc", "gcc", "clang"):
        found = shutil.which(name) if name else None
        if found:
            return found
    return None


def compile_shared(
    source: str, workdir: Path, name: str, flags: tuple[str, ...] = ()
) -> ctypes.CDLL | None:
    """Compile the C ``source`` for this CPU (``-O3 -march=native`` and ``flags``) into
    ``workdir/name.so`` and load it; ``None`` where there is no compiler or it fails."""
    compiler = c_compiler()
    if compiler is None:
        return None
    path, library = workdir / f"{name}.c", workdir / f"{name}.so"
    path.write_text(source)
    command = [compiler, "-O3", "-march=native", *flags, "-shared", "-fPIC"]
    try:
        subprocess.run(
            [*command, "-o", str(library), str(path)], capture_output=True, check=True,
            timeout=60,
        )  # fmt: skip
        return ctypes.CDLL(str(library))
    except (OSError, subprocess.SubprocessError):
        return None


def _load_kernel(workdir: Path) -> ctypes.CDLL | None:
    """Compile the FMA loop for this CPU and load it; ``None`` where that fails."""
    lib = compile_shared(_FMA_SOURCE, workdir, "d5_fma", ("-ffp-contract=fast",))
    if lib is None:
        return None
    lib.d5_fma.argtypes = [ctypes.c_long, ctypes.c_float]
    lib.d5_fma.restype = ctypes.c_float
    return lib


def _run_threads(lib: ctypes.CDLL, threads: int, iterations: int) -> float:
    """Wall seconds for ``threads`` threads each running ``iterations`` of the loop at
    once (ctypes releases the GIL for the call)."""
    start = threading.Barrier(threads + 1)

    def work() -> None:
        start.wait()
        lib.d5_fma(iterations, 1e-3)

    workers = [threading.Thread(target=work, daemon=True) for _ in range(threads)]
    for worker in workers:
        worker.start()
    start.wait()
    t0 = time.perf_counter()
    for worker in workers:
        worker.join()
    return time.perf_counter() - t0


def measure_peak(threads: int | None = None) -> Peak | None:
    """Measure the float32 peak with a calibrated FMA loop on ``threads`` threads (every
    usable core by default): the best of a few trials of about 0.1 s.

    :return: the peak, or ``None`` where no C compiler can build the loop.
    """
    threads = threads or usable_cores()
    with tempfile.TemporaryDirectory(prefix="d5-peak-") as tmp:
        lib = _load_kernel(Path(tmp))
        if lib is None:
            return None
        iterations = 1 << 14
        while (elapsed := _run_threads(lib, 1, iterations)) < _TRIAL_S / 10:
            iterations *= 4
        iterations = max(1, int(iterations * _TRIAL_S / elapsed))
        best = min(_run_threads(lib, threads, iterations) for _ in range(_TRIALS))
        flops = lib.d5_flops_per_iteration() * iterations * threads
        bits = lib.d5_vector_bits()
    how = f"measured: {bits}-bit FMA loop on {threads} core(s)"
    return Peak(_rates(flops / best / 1e9), how, threads)


def estimate_peak(cores: int | None = None) -> Peak:
    """Estimate the cores' peak GFLOP/s for float32 and float64 from ``/proc/cpuinfo``:
    cores x clock x vector width x FMA units (the clock is often the base clock)."""
    info = read_cpuinfo()
    flags = set(info.get("flags", "").split())
    cores = cores or usable_cores()
    model = info.get("model name", "")
    ghz = 0.0
    match = re.search(r"@\s*([\d.]+)\s*GHz", model)
    if match:
        ghz = float(match.group(1))
    elif info.get("cpu mhz"):
        ghz = float(info["cpu mhz"]) / 1000
    if ghz <= 0:
        return Peak({}, f"unknown: no clock rate in /proc/cpuinfo; set {PEAK_ENV_VAR}", cores)
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
    return Peak(_rates(f32), f"estimate: {how}", cores)
