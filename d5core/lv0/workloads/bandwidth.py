"""The memory bandwidth of this machine, the roofline's second roof, and the bytes an
operator problem must move at least (its compulsory traffic).

The bandwidth is, in order:

1. ``D5_PEAK_BANDWIDTH`` (GB/s, 1 GB = 10^9 bytes, for example from the memory's data
   sheet); it must be a positive number;
2. measured: a STREAM-like triad ``a[i] = b[i] + s * c[i]`` on float64 arrays several
   times larger than the last-level cache, split over every core this process may use
   at once, counting 24 bytes per element as STREAM does (write-allocate traffic is not
   counted). The loop is C, compiled with the compiler :mod:`d5core.lv0.workloads.roofline`
   uses; where there is none, numpy runs the triad as two passes (``a = s * c``, then
   ``a += b``: 40 bytes per element), labelled as such. The best of a few passes is
   kept, and the whole measurement takes well under a second. It is taken once per
   machine and cached beside the peak (``bandwidth.json`` in
   :func:`d5core.lv0.workloads.roofline.cache_dir`), keyed like the peak; a measurement taken
   while the machine is busy (load average above half the cores) is used but not cached.

The compulsory traffic of a problem (:func:`compulsory_bytes`) is what any
implementation must read and write at least: every input read once and every output
written once (a backward pass reads the inputs and the output gradients, and writes the
gradients of the differentiable inputs). The arithmetic intensity of the roofline is the
problem's FLOPs over these bytes.
"""

from __future__ import annotations

import ctypes
import functools
import os
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from d5core.errors import UsageError
from d5core.lv0.workloads import roofline
from d5core.overrides import number_from_env

if TYPE_CHECKING:
    from d5core.lv0.workloads.problems import Problem

__all__ = [
    "BANDWIDTH_ENV_VAR",
    "Bandwidth",
    "bandwidth_cache_path",
    "bandwidth_override",
    "compulsory_bytes",
    "last_level_cache_bytes",
    "measure_bandwidth",
    "memory_bandwidth",
    "output_bytes",
]

#: The environment variable that sets the memory bandwidth in GB/s.
BANDWIDTH_ENV_VAR = "D5_PEAK_BANDWIDTH"
#: Each array is at least this many times the last-level cache, and within these bounds.
_CACHE_MULTIPLE = 4
_MIN_ARRAY_BYTES = 16 * 2**20
_MAX_ARRAY_BYTES = 256 * 2**20
#: Timed passes over the arrays: at least _MIN_PASSES, then more while within _BUDGET_S.
_MIN_PASSES = 3
_MAX_PASSES = 10
_BUDGET_S = 0.3
#: Bytes STREAM counts per element of its triad: b and c read, a written.
_TRIAD_BYTES = 24
#: Bytes numpy's two-pass triad moves per element: c read, a written; a and b read, a written.
_NUMPY_TRIAD_BYTES = 40

_TRIAD_SOURCE = r"""
void d5_fill(double *x, long n, double value) {
    for (long i = 0; i < n; i++) x[i] = value;
}
void d5_triad(double *restrict a, const double *restrict b, const double *restrict c,
              long n, double s) {
    for (long i = 0; i < n; i++) a[i] = b[i] + s * c[i];
}
"""


@dataclass(frozen=True)
class Bandwidth:
    """A memory bandwidth in GB/s (10^9 bytes per second), and how it was obtained."""

    gbps: float
    source: str


def bandwidth_override() -> Bandwidth | None:
    """The bandwidth ``D5_PEAK_BANDWIDTH`` sets, or ``None`` where it is unset or empty.

    :raises UsageError: when it is not a positive, finite number.
    """
    value = number_from_env(
        BANDWIDTH_ENV_VAR,
        must_be="a positive number of GB/s",
        unset_to="measure this machine's memory bandwidth",
    )
    return None if value is None else Bandwidth(value, BANDWIDTH_ENV_VAR)


def memory_bandwidth() -> Bandwidth:
    """This machine's memory bandwidth (see the module docstring).

    :raises UsageError: for a malformed ``D5_PEAK_BANDWIDTH``.
    """
    override = bandwidth_override()
    if override is not None:
        return override
    return _machine_bandwidth()


def bandwidth_cache_path() -> Path:
    """Where measured bandwidths are kept: ``bandwidth.json`` beside the peak's cache."""
    return roofline.cache_dir() / "bandwidth.json"


@functools.lru_cache(maxsize=1)
def _machine_bandwidth() -> Bandwidth:
    """The cached bandwidth of this machine, else a new measurement; once per process."""
    path = bandwidth_cache_path()
    key = roofline.machine_key()
    cached = roofline.cached_value(path, key, "gbps")
    if cached is not None:
        return Bandwidth(*cached)
    busy = roofline.machine_busy()
    measured = measure_bandwidth()
    if busy:
        return Bandwidth(measured.gbps, f"{measured.source} under load (not cached)")
    roofline.write_cache(path, key, {"gbps": measured.gbps, "how": measured.source})
    return measured


def last_level_cache_bytes() -> int:
    """The machine's last-level cache in bytes, all its instances together (one per
    socket or core complex), from ``/sys``; 0 where it cannot be read."""
    root = Path("/sys/devices/system/cpu/cpu0/cache")
    best_level, size, sharing = -1, 0, 1
    try:
        entries = sorted(root.glob("index*"))
    except OSError:
        return 0
    for entry in entries:
        try:
            level = int((entry / "level").read_text())
            kind = (entry / "type").read_text().strip()
            text = (entry / "size").read_text().strip().upper()
            shared = (entry / "shared_cpu_list").read_text().strip()
        except (OSError, ValueError):
            continue
        if kind == "Instruction" or level < best_level:
            continue
        units = {"K": 2**10, "M": 2**20, "G": 2**30}
        try:
            value = int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)
        except ValueError:
            continue
        best_level, size, sharing = level, value, max(1, _count_cpus(shared))
    if not size:
        return 0
    instances = max(1, -(-(os.cpu_count() or 1) // sharing))
    return size * instances


def _count_cpus(cpu_list: str) -> int:
    """The number of CPUs in a list such as ``0-3,8``."""
    count = 0
    for part in cpu_list.split(","):
        if "-" in part:
            low, high = part.split("-", 1)
            count += int(high) - int(low) + 1
        elif part.strip():
            count += 1
    return count


def _array_bytes() -> int:
    """The size of each of the triad's three arrays."""
    wanted = max(_MIN_ARRAY_BYTES, _CACHE_MULTIPLE * last_level_cache_bytes())
    try:
        from d5core.lv0.workloads.memory import available_bytes

        room = available_bytes() // 8
    except Exception:  # psutil missing or unreadable: stay at the bounds
        room = _MAX_ARRAY_BYTES
    return int(max(_MIN_ARRAY_BYTES // 4, min(wanted, _MAX_ARRAY_BYTES, room)))


def measure_bandwidth(threads: int | None = None, array_bytes: int | None = None) -> Bandwidth:
    """Measure the memory bandwidth with a triad on ``threads`` threads (every usable
    core by default) over three float64 arrays of ``array_bytes`` each (by default several
    times the last-level cache): the best of a few passes.

    :raises UsageError: for fewer than one thread or an array smaller than a page.
    """
    threads = threads or roofline.usable_cores()
    array_bytes = array_bytes or _array_bytes()
    if threads < 1 or array_bytes < 4096:
        raise UsageError(
            f"a bandwidth measurement needs at least 1 thread and 4096 bytes per array, "
            f"not {threads} and {array_bytes}"
        )
    n = array_bytes // 8
    a, b, c = (np.empty(n) for _ in range(3))
    bounds = [(i * n // threads, (i + 1) * n // threads) for i in range(threads)]
    with tempfile.TemporaryDirectory(prefix="d5-bandwidth-") as tmp:
        lib = roofline.compile_shared(_TRIAD_SOURCE, Path(tmp), "d5_triad")
        if lib is not None:
            kernel, per_element, how = _c_triad(lib, a, b, c), _TRIAD_BYTES, "C triad"
        else:
            kernel, per_element = _numpy_triad(a, b, c), _NUMPY_TRIAD_BYTES
            how = "numpy two-pass triad (no C compiler)"
        best = _best_pass(kernel, bounds)
    mib = array_bytes / 2**20
    source = f"measured: {how} over 3 x {mib:.0f} MiB on {threads} core(s)"
    return Bandwidth(per_element * n / best / 1e9, source)


_Kernel = tuple[Callable[[int, int], None], Callable[[int, int], None]]


def _c_triad(lib: ctypes.CDLL, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> _Kernel:
    """(fill, triad) over element ranges, calling the compiled loop (no GIL held)."""
    lib.d5_fill.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_double]
    lib.d5_fill.restype = None
    lib.d5_triad.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_long, ctypes.c_double]
    lib.d5_triad.restype = None
    pa, pb, pc = (int(x.ctypes.data) for x in (a, b, c))

    def fill(low: int, high: int) -> None:
        for pointer, value in ((pa, 0.0), (pb, 1.0), (pc, 2.0)):
            lib.d5_fill(pointer + 8 * low, high - low, value)

    def triad(low: int, high: int) -> None:
        lib.d5_triad(pa + 8 * low, pb + 8 * low, pc + 8 * low, high - low, 3.0)

    return fill, triad


def _numpy_triad(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> _Kernel:
    """(fill, triad) over element ranges with numpy ufuncs (they release the GIL)."""

    def fill(low: int, high: int) -> None:
        a[low:high] = 0.0
        b[low:high] = 1.0
        c[low:high] = 2.0

    def triad(low: int, high: int) -> None:
        np.multiply(c[low:high], 3.0, out=a[low:high])
        np.add(a[low:high], b[low:high], out=a[low:high])

    return fill, triad


def _on_threads(work: Callable[[int, int], None], bounds: list[tuple[int, int]]) -> float:
    """Wall seconds for one thread per range of ``bounds`` running ``work`` at once."""
    start = threading.Barrier(len(bounds) + 1)

    def run(low: int, high: int) -> None:
        start.wait()
        work(low, high)

    workers = [threading.Thread(target=run, args=span, daemon=True) for span in bounds]
    for worker in workers:
        worker.start()
    start.wait()
    t0 = time.perf_counter()
    for worker in workers:
        worker.join()
    return time.perf_counter() - t0


def _best_pass(kernel: _Kernel, bounds: list[tuple[int, int]]) -> float:
    """The fastest of the timed passes, after each thread has first touched (and so
    placed) its own part of the arrays and run one untimed pass."""
    fill, triad = kernel
    _on_threads(fill, bounds)
    _on_threads(triad, bounds)
    times: list[float] = []
    began = time.perf_counter()
    while len(times) < _MAX_PASSES and (
        len(times) < _MIN_PASSES or time.perf_counter() - began < _BUDGET_S
    ):
        times.append(_on_threads(triad, bounds))
    return min(times)


# -- compulsory traffic of a problem ---------------------------------------------------------


def compulsory_bytes(problem: Problem, dtype: str = "float32", direction: str = "forward") -> int:
    """The bytes one pass of ``problem`` must move at least: each tensor once.

    Forward: every input read and every output written. Backward: every input and every
    output gradient read, and the gradient of every differentiable input written.
    Float inputs are in ``dtype``, labels and indices int64, masks one byte; constant
    inputs (shapes, axes) are read when the computation is built and are not counted.

    :raises UsageError: for a direction other than ``forward`` or ``backward``.
    """
    from d5core.lv0.workloads.problems import dtype_of

    if direction not in ("forward", "backward"):
        raise UsageError(f"direction must be forward or backward, not {direction!r}")
    itemsize = dtype_of(dtype).itemsize
    read = 0
    grads = 0
    for spec in problem.inputs:
        elements = int(np.prod(spec.shape, dtype=object))
        if spec.kind in ("float", "positive"):
            read += elements * itemsize
            grads += elements * itemsize
        elif spec.kind in ("labels", "indices"):
            read += elements * 8
        elif spec.kind == "mask":
            read += elements
    written = output_bytes(problem, dtype)
    if direction == "forward":
        return int(read + written)
    return int(read + written + grads)


def output_bytes(problem: Problem, dtype: str = "float32") -> int:
    """The bytes of the outputs of one forward pass of ``problem``.

    The shapes and types come from ONNX shape inference on the problem as a one-node
    graph (with as many outputs as d5's graph operators give the node: LSTM's final
    states and LayerNormalization's statistics count too). Where inference cannot tell
    (an operator ONNX does not know, such as a custom one), the output is taken to be as
    large as the largest float input, in ``dtype``.
    """
    from d5core.lv0.workloads.problems import dtype_of

    inferred = _inferred_output_bytes(problem, dtype)
    if inferred is not None:
        return inferred
    itemsize = dtype_of(dtype).itemsize
    floats = [
        int(np.prod(spec.shape, dtype=object))
        for spec in problem.inputs
        if spec.kind in ("float", "positive")
    ]
    return max(floats, default=0) * itemsize


def _inferred_output_bytes(problem: Problem, dtype: str) -> int | None:
    """The outputs' bytes by ONNX shape inference, or ``None`` where it cannot tell."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from d5core.onnx.graph_operator import GRAPH_OPERATORS, one_node, one_node_opset

    outputs = dict(GRAPH_OPERATORS).get(problem.op, 1)
    if problem.op == "Split":
        split = [s.value for s in problem.inputs[1:2] if s.kind == "const"]
        outputs = len(split[0]) if split else int(problem.attributes.get("num_outputs", 1))
    float_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    kinds = {"labels": TensorProto.INT64, "indices": TensorProto.INT64, "mask": TensorProto.BOOL}
    graph_inputs, constants = [], []
    for i, spec in enumerate(problem.inputs):
        if spec.kind == "const":
            constants.append(numpy_helper.from_array(np.asarray(spec.value, np.int64), f"in{i}"))
        else:
            elem = kinds.get(spec.kind, float_type)
            graph_inputs.append(helper.make_tensor_value_info(f"in{i}", elem, list(spec.shape)))
    try:
        node = one_node(problem.op, problem.attributes, [True] * len(problem.inputs), outputs)
        graph = helper.make_graph([node], "d5", graph_inputs, [], initializer=constants)
        opset = one_node_opset(problem.op, problem.attributes)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # an operator or attribute ONNX does not know: not inferable
        return None
    found = {info.name: info.type.tensor_type for info in inferred.graph.value_info}
    total = 0
    for name in node.output:
        tensor = found.get(name)
        if tensor is None or not tensor.HasField("shape"):
            return None
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim]
        if any(d < 0 for d in dims):
            return None
        try:
            item = helper.tensor_dtype_to_np_dtype(tensor.elem_type).itemsize
        except (KeyError, TypeError, ValueError):
            return None
        total += int(np.prod(dims, dtype=object)) * item
    return total
