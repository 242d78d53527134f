"""d5-kernels' GEMM against numpy's (OpenBLAS) and torch's (MKL), float32 and float64.

Each row is one product ``Y[m, n] = op(A) @ op(B)`` (square sizes, then DeepBench
training shapes, written ``MxNxK`` with ``:At``/``:Bt`` for a transposed operand), one
dtype and one thread count. Three sides compute it into buffers made beforehand: the
native GEMM (``d5_kernels._native.gemm``, which takes a transposed operand as a strided
view, as d5's ``Gemm`` operator passes it), ``np.matmul(..., out=)`` and
``torch.mm(..., out=)`` on the same arrays. They are first checked to agree, then timed
in interleaved rounds (see ``_rounds.py``): the table shows each side's median GFLOP/s
and its share of the FMA peak (one core's, measured by d5-kernels with the widest FMA
the CPU runs, times the thread count), and native's speed over numpy's and torch's as
the ratio of the medians with the range of the per-round ratios. The issue's target is
native >= 0.9 of the faster library on every row.

Threads: ``d5_kernels.set_num_threads`` (OpenMP), threadpoolctl for numpy's OpenBLAS,
``torch.set_num_threads``. OpenBLAS runs its own choice of kernels: the script starts
again without ``OPENBLAS_CORETYPE``/``OPENBLAS_L2_SIZE`` if they are set, and the header
names the kernels OpenBLAS loaded (threadpoolctl's ``architecture``). Each row waits for
the load average to fall under the core count and is measured again if it rose meanwhile.

    .venv/bin/python benchmarks/native_gemm.py [--sizes 256,512,1024,2048]
        [--shapes 1760x16x1760,35x8457x2048,...] [--dtype float32,float64]
        [--threads 1,2] [--rounds 5] [--retries 2] [--max-wait 120] [--isa avx2] [--json]

A quick look: ``--sizes 512 --shapes "" --dtype float32 --threads 1 --rounds 3``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import d5_kernels
import numpy as np
import torch
from _machine import load, machine
from _rounds import (
    OTHERS_NOTE,
    LoadWatch,
    Waiting,
    add_common_arguments,
    cores,
    drop_openblas_overrides,
    interleaved,
    isa_line,
    load_cells,
    load_footer,
    measure_peaks,
    measure_row,
    method_lines,
    parse_list,
    ratio_cell,
    ratio_summary,
    select_isa,
    side_cell,
    side_summary,
)
from d5_kernels import _native

__all__ = ["Shape", "main", "parse_shape"]

#: Square sizes measured by default.
DEFAULT_SIZES = "256,512,1024,2048"
#: DeepBench training GEMMs measured by default: thin (n = 16) and moderate (n = 128)
#: products, a large one, a short wide one (m = 35) and one with a transposed A.
DEFAULT_SHAPES = (
    "1760x16x1760,1760x128x1760,2048x7000x2048,35x8457x2048,7680x16x2560,3072x128x1024,"
    "1760x128x1760:At"
)
#: Seconds each side computes per round (at least one call).
BATCH_SECONDS = 0.15
#: Largest difference from numpy allowed, relative to the largest element of Y.
TOLERANCE = {"float32": 1e-4, "float64": 1e-11}
#: The issue's target: native at least this fraction of the faster library's speed.
TARGET = 0.9


@dataclass(frozen=True)
class Shape:
    """``Y[m, n] = op(A) @ op(B)`` with an inner dimension ``k``; A is stored ``k x m``
    when ``trans_a``, B ``n x k`` when ``trans_b``."""

    m: int
    n: int
    k: int
    trans_a: bool = False
    trans_b: bool = False

    @property
    def label(self) -> str:
        marks = ("At" if self.trans_a else "") + ("Bt" if self.trans_b else "")
        return f"{self.m}x{self.n}x{self.k}" + (f":{marks}" if marks else "")

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k


def parse_shape(text: str) -> Shape:
    """``"MxNxK"``, optionally followed by ``:At``, ``:Bt`` or ``:AtBt``."""
    found = re.fullmatch(r"(\d+)x(\d+)x(\d+)(?::(At)?(Bt)?)?", text.strip())
    if not found or min(int(found[i]) for i in (1, 2, 3)) < 1:
        raise SystemExit(
            f"cannot read GEMM shape {text!r}: write MxNxK with positive sizes, "
            "optionally with :At, :Bt or :AtBt (for example 1760x128x1760:At)"
        )
    m, n, k = (int(found[i]) for i in (1, 2, 3))
    return Shape(m, n, k, found[4] is not None, found[5] is not None)


def operands(shape: Shape, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """op(A) and op(B), transposed ones as views of the stored matrix (no copy)."""
    rng = np.random.default_rng(shape.m * 7 + shape.n * 3 + shape.k)
    a_stored = (shape.k, shape.m) if shape.trans_a else (shape.m, shape.k)
    b_stored = (shape.n, shape.k) if shape.trans_b else (shape.k, shape.n)
    a = rng.standard_normal(a_stored).astype(dtype)
    b = rng.standard_normal(b_stored).astype(dtype)
    return (a.T if shape.trans_a else a), (b.T if shape.trans_b else b)


def blas_limits(threads: int) -> Any:
    """A context that limits numpy's BLAS to ``threads``."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=threads, user_api="blas")


def blas_info() -> dict[str, str]:
    """numpy's BLAS (threadpoolctl): library, version and the kernels it loaded."""
    from threadpoolctl import threadpool_info

    found = [info for info in threadpool_info() if info.get("user_api") == "blas"]
    # numpy's own BLAS lives in numpy.libs; scipy, if something imported it, brings another.
    found.sort(key=lambda info: "numpy" not in str(info.get("filepath", "")))
    if not found:
        return {"library": "unknown", "version": "", "architecture": "unknown"}
    info = found[0]
    return {
        "library": str(info.get("internal_api")),
        "version": str(info.get("version")),
        "architecture": str(info.get("architecture")),
    }


def torch_blas() -> str:
    """torch's version and the MKL it was built with."""
    mkl = re.search(r"Math Kernel Library Version (\S+)", torch.__config__.show())
    return f"torch {torch.__version__} (MKL {mkl[1] if mkl else 'not found'})"


def sides_of(shape: Shape, dtype: str) -> dict[str, Callable[[], object]]:
    """The three sides' callables, after checking that they agree."""
    a, b = operands(shape, dtype)
    y = {name: np.empty((shape.m, shape.n), dtype) for name in ("native", "numpy", "torch")}
    ta, tb, ty = torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(y["torch"])
    sides: dict[str, Callable[[], object]] = {
        "native": lambda: _native.gemm(a, b, y["native"], 1.0, 0.0),
        "numpy": lambda: np.matmul(a, b, out=y["numpy"]),
        "torch": lambda: torch.mm(ta, tb, out=ty),
    }
    for run in sides.values():
        run()
    scale = max(float(np.abs(y["numpy"]).max()), 1e-30)
    for name in ("native", "torch"):
        error = float(np.abs(y[name] - y["numpy"]).max()) / scale
        if not error <= TOLERANCE[dtype]:
            raise SystemExit(
                f"{name} and numpy disagree on {shape.label} {dtype} (relative error "
                f"{error:.1e}); check the build before timing it"
            )
    return sides


def measure(
    shape: Shape, dtype: str, threads: int, rounds: int, peak: float, watch: LoadWatch
) -> dict[str, Any]:
    """One row: every side timed in interleaved rounds with ``threads`` threads."""
    d5_kernels.set_num_threads(threads)
    torch.set_num_threads(threads)
    with blas_limits(threads):
        sides = sides_of(shape, dtype)
        times = interleaved(sides, rounds, BATCH_SECONDS, watch)
    roof = peak * threads
    row: dict[str, Any] = {
        "dtype": dtype,
        "threads": threads,
        "shape": shape.label,
        "m": shape.m,
        "n": shape.n,
        "k": shape.k,
        "trans_a": shape.trans_a,
        "trans_b": shape.trans_b,
        "flops": shape.flops,
        "roof_gflops": roof,
    }
    for name, seconds in times.items():
        row[name] = side_summary(seconds, shape.flops, roof)
    for other in ("numpy", "torch"):
        row[f"native_vs_{other}"] = ratio_summary(times["native"], times[other], shape.flops)
    row["native_vs_best"] = min(row["native_vs_numpy"]["ratio"], row["native_vs_torch"]["ratio"])
    return row


def header(report: dict[str, Any]) -> list[str]:
    blas = report["blas"]
    removed = report["openblas_env_removed"]
    tiles = "; ".join(
        f"{dtype} tile {b.mr}x{b.nr}, kc={b.kc} mc={b.mc} nc={b.nc}"
        for dtype in report["peak_gflops_per_core"]
        for b in [d5_kernels.blocking(report["isa"], dtype)]
    )
    return [
        f"machine: {report['machine']}; {report['load_at_start']}",
        f"{report['isa_line']}; {tiles}",
        f"numpy: {blas['library']} {blas['version']} running its {blas['architecture']} "
        f"kernels ({'removed ' + ', '.join(removed) if removed else 'no OpenBLAS overrides set'}"
        f"); {report['torch']}",
        *method_lines(report, "ratios are native's speed over the library's"),
    ]


def table(report: dict[str, Any]) -> str:
    lines = header(report)
    lines.append(
        "| dtype | threads | MxNxK | native GFLOP/s (% peak) | numpy | torch | native / numpy "
        "| native / torch | load | under cores | others' CPU |"
    )
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for row in report["rows"]:
        lines.append(
            f"| {row['dtype']} | {row['threads']} | {row['shape']} | {side_cell(row['native'])} "
            f"| {side_cell(row['numpy'])} | {side_cell(row['torch'])} "
            f"| {ratio_cell(row['native_vs_numpy'])} | {ratio_cell(row['native_vs_torch'])} "
            f"{load_cells(row)}"
        )
    reached = sum(row["native_vs_best"] >= TARGET for row in report["rows"])
    worst = min(report["rows"], key=lambda row: row["native_vs_best"])
    lines += [
        "",
        f"native >= {TARGET} of the faster library on {reached} of {len(report['rows'])} rows; "
        f"worst {worst['native_vs_best']:.2f} ({worst['dtype']}, {worst['threads']} "
        f"thread(s), {worst['shape']}).",
        load_footer(report),
        OTHERS_NOTE,
    ]
    return "\n".join(lines)


def shapes_of(args: argparse.Namespace) -> list[Shape]:
    squares = [Shape(int(n), int(n), int(n)) for n in parse_list(args.sizes)]
    shapes = squares + [parse_shape(text) for text in parse_list(args.shapes)]
    if not shapes:
        raise SystemExit("no GEMM to measure: give --sizes or --shapes")
    return shapes


def main() -> int:
    removed = drop_openblas_overrides()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help="square sizes (n = m = k)")
    parser.add_argument("--shapes", default=DEFAULT_SHAPES, help="MxNxK[:At|:Bt|:AtBt], ...")
    parser.add_argument("--dtype", default="float32,float64", help="float32, float64 or both")
    add_common_arguments(parser, rounds=5)
    args = parser.parse_args()
    select_isa(args.isa)
    dtypes = parse_list(args.dtype)
    if not set(dtypes) <= set(TOLERANCE) or not dtypes:
        raise SystemExit(f"--dtype {args.dtype!r}: choose float32, float64 or both")
    shapes = shapes_of(args)
    # machine() applies d5's allocator policy, as d5 does before it measures.
    where, load_at_start = machine(), load()
    peaks = measure_peaks(dtypes)
    waiting = Waiting(args.max_wait, args.wait_budget)
    rows = [
        measure_row(
            partial(measure, shape, dtype, threads, args.rounds, peaks[dtype]),
            args.retries,
            waiting,
        )
        for dtype in dtypes
        for threads in (int(t) for t in parse_list(args.threads))
        for shape in shapes
    ]
    report = {
        "machine": where,
        "cores": cores(),
        "load_at_start": load_at_start,
        "isa": d5_kernels.isa(),
        "isa_line": isa_line(),
        "peak_isa": d5_kernels.available_isas()[-1],
        "peak_gflops_per_core": peaks,
        "blas": blas_info(),
        "openblas_env_removed": removed,
        "torch": torch_blas(),
        "rounds": args.rounds,
        "retries": args.retries,
        "waiting": waiting.report(),
        "all_rows_under_cores": all(row["load_under_cores"] for row in rows),
        "rows": rows,
    }
    print(json.dumps(report, indent=2) if args.json else table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
