"""Framework dispatch cost, measured with one C++ custom operator built into every framework.

The same C++ kernel (a scaled ReLU, ``Y = alpha * max(X, 0)``, written by this script
into a temporary folder; or ``--kernel bias_gelu``, the worked example of
docs/operators.md) is built with ``d5 op build``'s machinery
(:func:`d5core.lv0.customop.build`) for every framework installed in the running
environment, and timed at 1, 10, ..., 1M float32 elements. The kernel being identical, the
differences between frameworks are their own costs of calling it: the small-size floor
is a framework's fixed overhead per call, and the size where the time per call reaches
twice the floor is where the kernel starts to dominate.

What is timed is what d5 itself times: the callable of the custom operator's
``prepare_forward`` (``prepare_backward`` for ``backward``), called the way d5's
measurement engine calls it: in batches of calls between two clock reads, each read
preceded by the operator's synchronizer, :func:`d5core.measure.synchronizer_of` (``None``
for the synchronous frameworks; for MXNet, whose engine returns before the work is done,
the ``d5_synchronize`` hook, ``mx.nd.waitall()``, once at the end of each batch as in the
engine's blocks). A batch lasts about ``--batch-s`` (1 to 10 000 calls), so the clock
costs nothing measurable.

Before anything is timed every framework's output (and input gradient) must equal the
numpy build's bit for bit, and the numpy build's must equal numpy's own
``alpha * max(x, 0)``: the same kernel ran everywhere.

Design, as ``executor_fairness.py`` (whose ``Side``, ``Comparison`` and ``measure`` run
the rounds here): ``--processes`` fresh worker processes, one after the other, each
measuring every framework of this environment. For each direction and size a worker
makes one side per framework, calls each once, fixes one number of batches per block for
the size (a block of the fastest side lasts about ``--block-s``), runs one discarded
block of each, then ``--rounds`` rounds, each running one block of every framework in an
order shuffled per round (garbage collection off). A block's value is the median of its
per-call times (batch time / calls per batch). Per round, each framework's block is
divided by the numpy build's (the ratio: the same C++ called through pybind11 with no
framework around it) and subtracted from it (µs added per call). A worker reports the
median over its rounds; the summary gives the median over processes, with the
nonparametric CI of that median across processes (``median_ci``; with 5 processes
[min, max], coverage 94%; with one process the CI is over rounds).

MXNet imports only beside numpy 1.23, in its own environment (``.venv-mxnet``): run the
script there too, each run writing JSON (``--out``), and merge them with ``--combine``
(one table for all, and the log-log plot as SVG). The numpy build runs in every
environment, as the reference of that environment's ratios and as an anchor showing
whether the machine was as fast during both runs.

    .venv/bin/python benchmarks/customop_dispatch.py --out /tmp/main.json
    .venv-mxnet/bin/python benchmarks/customop_dispatch.py --out /tmp/mx.json
    .venv/bin/python benchmarks/customop_dispatch.py --combine /tmp/main.json /tmp/mx.json \\
        [--svg docs/img/customop_dispatch.svg]

Options: [--processes 5] [--rounds 7] [--sizes 1,10,...] [--directions forward,backward]
[--frameworks numpy,torch,...] [--kernel scaled_relu|bias_gelu] [--block-s 0.05]
[--batch-s 0.0005] [--cache DIR] [--json].
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from itertools import pairwise, repeat
from pathlib import Path
from typing import Any

import numpy as np
from _machine import allocator, load, machine
from executor_fairness import Comparison, Side, measure

from d5core.lv0.customop import available_glues, build
from d5core.measure import synchronizer_of
from d5core.measure.stats import median_ci, median_ci_coverage

#: The build every ratio is taken against: the kernel called through pybind11 alone.
REFERENCE = "numpy"
SIZES = (1, 10, 100, 1_000, 10_000, 100_000, 1_000_000)
DIRECTIONS = ("forward", "backward")
#: The kernel's multiplier, ``alpha`` (scaled ReLU) or ``scale`` (bias + GELU).
FACTOR = 0.5
#: Most calls in one timed batch.
MAX_BATCH = 10_000
#: Where the kernel dominates: the size at which the time per call reaches this many
#: times the floor (the time per call at the smallest size).
DOMINANCE = 2.0
#: The default plot, relative to the repository root.
SVG_PATH = Path(__file__).resolve().parent.parent / "docs" / "img" / "customop_dispatch.svg"

SCALED_RELU = """\
// Y = alpha * max(X, 0): one pass over memory, the cheapest kernel there is, so that
// what a framework adds around it shows at every size. The factor is selected, then
// multiplied, which g++ -O2 compiles without a branch: random signs would make a branch
// mispredict half the time.
#include <d5_op.h>

D5_OP_NAME("scaled_relu");
D5_OP_INPUTS("X");
D5_OP_OUTPUTS("Y");
D5_OP_FLOAT_ATTR("alpha", 0.5);
D5_OP_SHAPES("1024");

void forward(const d5::Inputs& in, d5::Outputs& out, const d5::Attributes& attrs) {
  d5::dispatch(in[0].dtype, [&](auto zero) {
    using T = decltype(zero);
    const T alpha = static_cast<T>(attrs.f("alpha"));
    const T* x = in[0].ptr<T>();
    T* y = out[0].ptr<T>();
    const std::int64_t n = in[0].size();
    for (std::int64_t i = 0; i < n; ++i) y[i] = (x[i] > T(0) ? alpha : T(0)) * x[i];
  });
}

void backward(const d5::Inputs& grad_out, const d5::Inputs& in, d5::Outputs& grad_in,
              const d5::Attributes& attrs) {
  d5::dispatch(in[0].dtype, [&](auto zero) {
    using T = decltype(zero);
    const T alpha = static_cast<T>(attrs.f("alpha"));
    const T* gy = grad_out[0].ptr<T>();
    const T* x = in[0].ptr<T>();
    T* gx = grad_in[0].ptr<T>();
    const std::int64_t n = in[0].size();
    for (std::int64_t i = 0; i < n; ++i) gx[i] = (x[i] > T(0) ? alpha : T(0)) * gy[i];
  });
}
"""

#: Kernel name to (its source: text, or a path under the repository; its attributes).
KERNELS: dict[str, tuple[str, dict[str, float]]] = {
    "scaled_relu": (SCALED_RELU, {"alpha": FACTOR}),
    "bias_gelu": ("examples/custom_ops/bias_gelu.cpp", {"scale": FACTOR}),
}

Fn = Callable[[], object]


# -- the operator -----------------------------------------------------------------------


def kernel_source(kernel: str, folder: Path) -> Path:
    """The C++ file of ``kernel``: the scaled ReLU written into ``folder``, or the
    repository's example."""
    text, _ = KERNELS[kernel]
    if kernel == "scaled_relu":
        path = folder / "scaled_relu.cpp"
        path.write_text(text)
        return path
    return Path(__file__).resolve().parent.parent / text


def make_inputs(kernel: str, size: int, seed: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The inputs (``size`` elements each, float32, seeded) and the output gradient."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(size, dtype=np.float32)
    grad = rng.standard_normal(size, dtype=np.float32)
    if kernel == "bias_gelu":  # a bias per element: X of shape (size,), B as long
        return [x, rng.standard_normal(size, dtype=np.float32)], [grad]
    return [x], [grad]


def expected_forward(kernel: str, inputs: list[np.ndarray]) -> np.ndarray | None:
    """numpy's own result for the scaled ReLU (bit-exact), ``None`` for bias + GELU
    (``erf`` has no numpy counterpart computed in the same order)."""
    if kernel != "scaled_relu":
        return None
    result: np.ndarray = np.float32(FACTOR) * np.maximum(inputs[0], np.float32(0))
    return result


def check_same(kernel: str, ops: dict[str, Any], inputs: list[np.ndarray],
               grads: list[np.ndarray], size: int) -> None:  # fmt: skip
    """Refuse to time unless every build computes what the numpy build does, bit for bit
    (and the numpy build what numpy does, for the scaled ReLU)."""
    reference = ops[REFERENCE]
    want = reference.forward(inputs)
    own = expected_forward(kernel, inputs)
    if own is not None and not np.array_equal(want[0], own):
        raise SystemExit(f"{kernel}[{size}]: the numpy build differs from numpy's own result")
    want_grads = reference.backward(grads, inputs, want)
    for name, op in ops.items():
        got = op.forward(inputs)
        got_grads = op.backward(grads, inputs, got)
        same = all(np.array_equal(g, w) for g, w in zip(got, want, strict=True)) and all(
            np.array_equal(g, w) for g, w in zip(got_grads, want_grads, strict=True)
        )
        if not same:
            raise SystemExit(
                f"{kernel}[{size}] on {name}: its output or gradient differs from the numpy "
                "build's; not the same kernel, nothing is timed"
            )


def synchronizer(op: Any, framework: str) -> tuple[Callable[[], None] | None, str]:
    """What d5 calls before each clock read for ``op``, and where it came from:
    :func:`synchronizer_of` the operator, else of its kernels when they declare
    ``asynchronous`` and the operator does not pass the flag on (``"none"`` for a
    synchronous framework).

    :raises SystemExit: when the kernels say the framework is asynchronous and no
        synchronizer can be had: the timing would miss queued work.
    """
    found = synchronizer_of(op)
    if found is not None:
        return found, "synchronizer_of(operator)"
    kernels = getattr(op, "kernels", None)
    if not getattr(kernels, "asynchronous", False):
        return None, "none"
    found = synchronizer_of(kernels)
    if found is None:
        raise SystemExit(f"{framework}: asynchronous, but d5 has no synchronizer for it")
    return found, "synchronizer_of(kernels)"


def batched(fn: Fn, calls: int, sync: Callable[[], None] | None) -> Fn:
    """``calls`` calls of ``fn``, then ``sync`` (as the engine's timed blocks end)."""
    if sync is None:

        def run() -> None:
            for _ in repeat(None, calls):
                fn()

        return run

    def run_synced() -> None:
        for _ in repeat(None, calls):
            fn()
        sync()

    return run_synced


def batch_size(fn: Fn, sync: Callable[[], None] | None, batch_s: float) -> int:
    """Calls per batch so that a batch lasts about ``batch_s`` (1 to :data:`MAX_BATCH`),
    grown at most tenfold per step as the engine's calibration does."""
    calls = 1
    while True:
        run = batched(fn, calls, sync)
        taken = math.inf
        for _ in range(3):
            t0 = time.perf_counter()
            run()
            taken = min(taken, time.perf_counter() - t0)
        if taken >= batch_s or calls >= MAX_BATCH:
            return calls
        grow = min(max(1.2 * batch_s / max(taken, 1e-9), 2.0), 10.0)
        calls = min(MAX_BATCH, math.ceil(calls * grow))


# -- a worker -------------------------------------------------------------------------


def thread_note(framework: str) -> str:
    """The framework's version and thread settings, as this process runs it."""
    if framework == "torch" and "torch" in sys.modules:
        torch = sys.modules["torch"]
        return f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    if framework == "tensorflow":
        from d5_plugin_tensorflow import _tf

        found = _tf.settings() or {}
        return (
            f"tensorflow {_tf.tensorflow().__version__}, intra-op "
            f"{found.get('intra_op_parallelism_threads')}, inter-op "
            f"{found.get('inter_op_parallelism_threads')} threads"
        )
    if framework == "mxnet":
        from d5_plugin_mxnet import _mx

        mx = _mx.mxnet()
        found = _mx.settings() or {}
        return (
            f"mxnet {mx.__version__}, OMP_NUM_THREADS {found.get('omp_num_threads')}, "
            f"engine {found.get('engine')}, {found.get('cpu_worker_threads')} worker threads"
        )
    if framework == "numpy":
        return f"numpy {np.__version__} (pybind11 module)"
    return framework


def worker(args: argparse.Namespace) -> dict[str, Any]:
    """One process's measurement of every framework at every size and direction."""
    policy = allocator()  # before any framework allocates
    built = build(args.source, args.frameworks, cache=args.cache)
    frameworks = [f for f in args.frameworks if f in built.builds]
    _, attributes = KERNELS[args.kernel]
    ops = {f: built.builds[f].create(attributes) for f in frameworks}
    found = {f: synchronizer(op, f) for f, op in ops.items()}
    syncs = {f: sync for f, (sync, _) in found.items()}
    rng = random.Random(args.seed)
    before = os.getloadavg()[0]
    rows = []
    for direction in args.directions:
        for size in args.sizes:
            inputs, grads = make_inputs(args.kernel, size, args.seed)
            check_same(args.kernel, ops, inputs, grads, size)
            sides, calls = {}, {}
            for f, op in ops.items():
                fn = (op.prepare_forward(inputs) if direction == "forward"
                      else op.prepare_backward(grads, inputs))  # fmt: skip
                sync = syncs[f]
                if sync is not None:
                    sync()
                calls[f] = batch_size(fn, sync, args.batch_s)
                sides[f] = Side(f, batched(fn, calls[f], sync))
            ref = sides[REFERENCE]
            others = [Comparison(f, s, ref, {}) for f, s in sides.items() if f != REFERENCE]
            samples = measure(others or [Comparison(REFERENCE, ref, ref, {})], args.rounds,
                              args.block_s, rng)  # fmt: skip
            ref_calls = [b / calls[REFERENCE] for b in ref.blocks]
            for f, side in sides.items():
                per_call = [b / calls[f] for b in side.blocks]
                pairs = list(zip(per_call, ref_calls, strict=True))
                rows.append({
                    "framework": f, "direction": direction, "size": size,
                    "calls_per_batch": calls[f], "batches_per_block": samples,
                    "rounds": len(per_call), "synchronized": found[f][1],
                    "per_call_s": statistics.median(per_call), "per_call_rounds": per_call,
                    "ratio": statistics.median(a / b for a, b in pairs),
                    "ratios": [a / b for a, b in pairs],
                    "added_us": statistics.median((a - b) * 1e6 for a, b in pairs),
                    "added_us_rounds": [(a - b) * 1e6 for a, b in pairs],
                })  # fmt: skip
            print(f"{direction} {size}: done", file=sys.stderr)
    return {"pid": os.getpid(), "frameworks": frameworks, "allocator": policy,
            "threads": {f: thread_note(f) for f in frameworks},
            "load_before": before, "load_after": os.getloadavg()[0], "rows": rows}  # fmt: skip


def run_worker(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """Run :func:`worker` in a fresh interpreter of this environment; read its JSON."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--seed", str(seed),
           "--source", str(args.source), "--kernel", args.kernel,
           "--frameworks", ",".join(args.frameworks),
           "--sizes", ",".join(map(str, args.sizes)), "--directions", ",".join(args.directions),
           "--rounds", str(args.rounds), "--block-s", str(args.block_s),
           "--batch-s", str(args.batch_s)]  # fmt: skip
    if args.cache:
        cmd += ["--cache", str(args.cache)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"worker failed (exit {done.returncode}): {last}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


# -- summary --------------------------------------------------------------------------

_KEY = ("framework", "direction", "size")


def summarize(processes: list[dict[str, Any]], env: str) -> list[dict[str, Any]]:
    """Per framework, direction and size: the median over processes of each process's
    median time per call, ratio to numpy and µs added, with their CIs across processes
    (across rounds with one process)."""
    cases: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for p in processes:
        for row in p["rows"]:
            cases.setdefault(tuple(row[k] for k in _KEY), []).append(row)
    out = []
    for rows in cases.values():
        first = rows[0]
        n = len(rows)
        values = {"per_call_s": [r["per_call_s"] for r in rows],
                  "ratio": [r["ratio"] for r in rows],
                  "added_us": [r["added_us"] for r in rows]}  # fmt: skip
        if n == 1:
            over = "rounds"
            spread = {"per_call_s": first["per_call_rounds"], "ratio": first["ratios"],
                      "added_us": first["added_us_rounds"]}  # fmt: skip
        else:
            over, spread = "processes", values
        summary = {"env": env, **{k: first[k] for k in _KEY}, "processes": n,
                   "rounds": first["rounds"], "calls_per_batch": first["calls_per_batch"],
                   "synchronized": first["synchronized"], "ci_over": over,
                   "ci_coverage": median_ci_coverage(len(spread["ratio"]))}  # fmt: skip
        for name, got in values.items():
            summary[name] = statistics.median(got)
            summary[f"{name}_ci"] = list(median_ci(spread[name]))
        summary["per_call_processes"] = values["per_call_s"]
        out.append(summary)
    return out


def crossing(points: Sequence[tuple[int, float]], level: float) -> float | None:
    """The size where the time per call first reaches ``level``, interpolated on the
    log-log line between the two sizes around it; ``None`` if it never does."""
    for (n0, t0), (n1, t1) in pairwise(points):
        if t1 >= level:
            if t0 >= level:
                return float(n0)
            frac = (math.log(level) - math.log(t0)) / (math.log(t1) - math.log(t0))
            return float(math.exp(math.log(n0) + frac * (math.log(n1) - math.log(n0))))
    return None


def characterize(summary: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per environment, framework and direction: the floor (time per call at the
    smallest size, with its CI), where the time reaches :data:`DOMINANCE` times it, and
    the cost per element at the largest size beyond the floor."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for row in summary:
        groups.setdefault((row["env"], row["framework"], row["direction"]), []).append(row)
    out = []
    for (env, framework, direction), rows in groups.items():
        rows.sort(key=lambda r: r["size"])
        points = [(r["size"], r["per_call_s"]) for r in rows]
        floor, last = rows[0], rows[-1]
        beyond = (last["per_call_s"] - floor["per_call_s"]) / max(last["size"] - floor["size"], 1)
        out.append({
            "env": env, "framework": framework, "direction": direction,
            "floor_size": floor["size"], "floor_s": floor["per_call_s"],
            "floor_ci": floor["per_call_s_ci"], "floor_added_us": floor["added_us"],
            "floor_ratio": floor["ratio"],
            "dominates_at": crossing(points, DOMINANCE * floor["per_call_s"]),
            "largest": last["size"], "largest_s": last["per_call_s"],
            "ns_per_element": beyond * 1e9,
        })  # fmt: skip
    return out


# -- tables ---------------------------------------------------------------------------


def _us(seconds: float) -> str:
    us = seconds * 1e6
    return f"{us:.3g}" if us < 100 else f"{us:.0f}"


def _size(n: float) -> str:
    for unit, scale in (("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:.3g}"


def labels(summary: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
    """A column name per (environment, framework): the framework, with its environment
    when the framework ran in more than one."""
    envs: dict[str, set[str]] = {}
    for row in summary:
        envs.setdefault(row["framework"], set()).add(row["env"])
    return {(row["env"], row["framework"]):
            row["framework"] if len(envs[row["framework"]]) == 1
            else f"{row['framework']} ({row['env']})" for row in summary}  # fmt: skip


def _columns(summary: list[dict[str, Any]]) -> list[tuple[str, str]]:
    seen: dict[tuple[str, str], None] = {}
    for row in summary:
        seen.setdefault((row["env"], row["framework"]), None)
    return list(seen)


def tables(summary: list[dict[str, Any]], traits: list[dict[str, Any]]) -> list[str]:
    """Markdown: per direction, the time per call at every size, the ratio to each
    environment's numpy build; then the floors and crossovers."""
    names = labels(summary)
    columns = _columns(summary)
    cells = {(r["env"], r["framework"], r["direction"], r["size"]): r for r in summary}
    lines: list[str] = []
    for direction in dict.fromkeys(r["direction"] for r in summary):
        sizes = sorted({r["size"] for r in summary if r["direction"] == direction})
        here = [c for c in columns if (*c, direction, sizes[0]) in cells]
        lines += [f"**{direction}**: µs per call, median over processes [95% CI]", "",
                  "| elements | " + " | ".join(names[c] for c in here) + " |",
                  "|---:|" + "---:|" * len(here)]  # fmt: skip
        for size in sizes:
            row = []
            for c in here:
                r = cells.get((*c, direction, size))
                if r is None:
                    row.append("–")
                    continue
                lo, hi = r["per_call_s_ci"]
                row.append(f"{_us(r['per_call_s'])} [{_us(lo)}–{_us(hi)}]")
            lines.append(f"| {_size(size)} | " + " | ".join(row) + " |")
        lines.append("")
        ratio_cols = [c for c in here if c[1] != REFERENCE]
        if ratio_cols:
            lines += [f"**{direction}**: ratio to the numpy build of the same environment "
                      "(median of per-round ratios) [95% CI]; µs added per call", "",
                      "| elements | " + " | ".join(names[c] for c in ratio_cols) + " |",
                      "|---:|" + "---:|" * len(ratio_cols)]  # fmt: skip
            for size in sizes:
                row = []
                for c in ratio_cols:
                    r = cells.get((*c, direction, size))
                    if r is None:
                        row.append("–")
                        continue
                    lo, hi = r["ratio_ci"]
                    row.append(f"{r['ratio']:.2f} [{lo:.2f}–{hi:.2f}]; {r['added_us']:+.3g}")
                lines.append(f"| {_size(size)} | " + " | ".join(row) + " |")
            lines.append("")
    lines += [
        f"| framework | direction | floor: µs per call at {_size(traits[0]['floor_size'])} "
        f"[95% CI] | added to numpy's floor (µs) | per call reaches {DOMINANCE:g}x the floor "
        "at (elements) | ns per element beyond the floor, at the largest size |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for t in traits:
        lo, hi = t["floor_ci"]
        at = t["dominates_at"]
        where = f"{_size(at)}" if at is not None else f"> {_size(t['largest'])}"
        added = "–" if t["framework"] == REFERENCE else f"{t['floor_added_us']:+.3g}"
        lines.append(
            f"| {names[(t['env'], t['framework'])]} | {t['direction']} | "
            f"{_us(t['floor_s'])} [{_us(lo)}–{_us(hi)}] | {added} | {where} | "
            f"{t['ns_per_element']:.2f} |"
        )
    return lines


# -- the plot -------------------------------------------------------------------------

_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf")
_DASH = {"forward": "", "backward": ' stroke-dasharray="6 4"'}


def svg_plot(summary: list[dict[str, Any]], title: str) -> str:
    """A self-contained log-log SVG: time per call against elements, one line per
    framework and direction (forward solid, backward dashed), with each point's CI as a
    vertical bar."""
    width, height = 800, 460
    left, right, top, bottom = 70, 250, 40, 50
    pw, ph = width - left - right, height - top - bottom
    sizes = [r["size"] for r in summary]
    times = [t * 1e6 for r in summary for t in (r["per_call_s"], *r["per_call_s_ci"])]
    x0, x1 = math.floor(math.log10(min(sizes))), math.ceil(math.log10(max(sizes)))
    y0, y1 = math.floor(math.log10(min(times))), math.ceil(math.log10(max(times)))
    x1, y1 = max(x1, x0 + 1), max(y1, y0 + 1)

    def px(n: float) -> float:
        return left + (math.log10(n) - x0) / (x1 - x0) * pw

    def py(us: float) -> float:
        return top + (y1 - math.log10(us)) / (y1 - y0) * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{left + pw / 2}" y="22" text-anchor="middle" font-size="14">'
           f"{_escape(title)}</text>"]  # fmt: skip
    for e in range(x0, x1 + 1):
        x = px(10.0**e)
        out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + ph}" stroke="#ddd"/>')
        out.append(f'<text x="{x:.1f}" y="{top + ph + 18}" text-anchor="middle">'
                   f"{_size(10.0**e)}</text>")  # fmt: skip
    for e in range(y0, y1 + 1):
        y = py(10.0**e)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" stroke="#ddd"/>')
        label = f"{10.0**e:g}"
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{label}</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" '
               'stroke="#333"/>')  # fmt: skip
    out.append(f'<text x="{left + pw / 2}" y="{height - 12}" text-anchor="middle">'
               "elements (float32)</text>")  # fmt: skip
    out.append(f'<text transform="translate(18 {top + ph / 2}) rotate(-90)" '
               'text-anchor="middle">µs per call (median over processes)</text>')  # fmt: skip
    names = labels(summary)
    columns = _columns(summary)
    color = {c: _COLORS[i % len(_COLORS)] for i, c in enumerate(columns)}
    legend_y = top + 10
    for c in columns:
        for direction in dict.fromkeys(r["direction"] for r in summary):
            rows = sorted((r for r in summary if (r["env"], r["framework"]) == c
                           and r["direction"] == direction), key=lambda r: r["size"])  # fmt: skip
            if not rows:
                continue
            points = " ".join(f"{px(r['size']):.1f},{py(r['per_call_s'] * 1e6):.1f}"
                              for r in rows)  # fmt: skip
            out.append(f'<polyline points="{points}" fill="none" stroke="{color[c]}" '
                       f'stroke-width="2"{_DASH.get(direction, "")}/>')  # fmt: skip
            for r in rows:
                x = px(r["size"])
                lo, hi = (py(v * 1e6) for v in r["per_call_s_ci"])
                out.append(f'<line x1="{x:.1f}" y1="{lo:.1f}" x2="{x:.1f}" y2="{hi:.1f}" '
                           f'stroke="{color[c]}"/>')  # fmt: skip
                out.append(f'<circle cx="{x:.1f}" cy="{py(r["per_call_s"] * 1e6):.1f}" r="2.5" '
                           f'fill="{color[c]}"/>')  # fmt: skip
            lx = left + pw + 15
            out.append(
                f'<line x1="{lx}" y1="{legend_y}" x2="{lx + 28}" y2="{legend_y}" '
                f'stroke="{color[c]}" stroke-width="2"{_DASH.get(direction, "")}/>'
            )
            out.append(f'<text x="{lx + 34}" y="{legend_y + 4}">'
                       f"{_escape(names[c])}, {direction}</text>")  # fmt: skip
            legend_y += 18
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# -- the command line -----------------------------------------------------------------


def _ints(text: str) -> list[int]:
    try:
        values = [int(float(t)) for t in text.split(",") if t.strip()]
    except ValueError:
        values = []
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"sizes are positive integers, not {text!r}")
    return sorted(set(values))


def _names(choices: Sequence[str] | None) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        names = [t.strip() for t in text.split(",") if t.strip()]
        bad = [n for n in names if choices is not None and n not in choices]
        if bad or not names:
            allowed = ", ".join(choices or ())
            raise argparse.ArgumentTypeError(f"{bad[0] if bad else text!r} is not one of {allowed}")
        return names

    return parse


def environment_name() -> str:
    """This environment's name: its virtualenv folder (``.venv``, ``.venv-mxnet``)."""
    return Path(sys.prefix).name


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Build the operator here, run the worker processes, and summarize them."""
    folder = Path(tempfile.mkdtemp(prefix="d5-dispatch-"))
    try:
        args.source = kernel_source(args.kernel, folder)
        glues = available_glues()
        installed = [n for n, g in glues.items() if g.available()]
        wanted = args.frameworks or installed
        if REFERENCE not in wanted:
            wanted = [REFERENCE, *wanted]
        started = time.perf_counter()
        built = build(args.source, wanted, cache=args.cache,
                      on_note=lambda line: print(line, file=sys.stderr))  # fmt: skip
        build_s = time.perf_counter() - started
        if REFERENCE not in built.builds:
            raise SystemExit("the numpy build, the reference of every ratio, could not be made")
        args.frameworks = [REFERENCE, *(n for n in wanted if n in built.builds and n != REFERENCE)]
        start_load = load()
        processes = [run_worker(args, args.seed * 1000 + i) for i in range(args.processes)]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    env = environment_name()
    summary = summarize(processes, env)
    return {
        "env": env, "python": sys.executable, "machine": machine(), "kernel": args.kernel,
        "frameworks": args.frameworks, "threads": processes[0]["threads"],
        "builds": {n: {"cached": b.cached, "build_seconds": b.build_seconds}
                   for n, b in built.builds.items()},
        "build_s": build_s, "skipped": built.notes,
        "load_start": start_load, "load_end": load(), "sizes": args.sizes,
        "directions": args.directions, "rounds": args.rounds, "block_s": args.block_s,
        "batch_s": args.batch_s, "processes": processes, "summary": summary,
        "traits": characterize(summary),
    }  # fmt: skip


def report(results: list[dict[str, Any]]) -> list[str]:
    """The text printed for one run or several combined."""
    summary = [row for r in results for row in r["summary"]]
    traits = characterize(summary)
    lines = []
    for r in results:
        n = len(r["processes"])
        lines.append(f"{r['env']}: {r['machine']}; {r['load_start']} at the start, "
                     f"{r['load_end']} at the end; {n} processes x {r['rounds']} rounds; "
                     f"kernel {r['kernel']}")  # fmt: skip
        synced = {row["framework"]: row["synchronized"] or "none" for row in r["summary"]}
        for framework, note in r["threads"].items():
            lines.append(f"  {framework}: {note}; synchronizer: {synced.get(framework)}")
        for note in r["skipped"]:
            lines.append(f"  note: {note}")
    lines.append("")
    lines += tables(summary, traits)
    suspicious = _suspicious(summary)
    if suspicious:
        lines += ["", *suspicious]
    return lines


def _suspicious(summary: list[dict[str, Any]]) -> list[str]:
    """A line per framework whose forward is faster than its environment's numpy build at
    the largest size by more than a third: the same kernel cannot be, so work went
    untimed. Backward is left out: each glue first allocates zeroed gradients, which
    torch and MXNet fill on both cores and the numpy glue with one ``memset``."""
    largest = max(r["size"] for r in summary)
    ref = {(r["env"], r["direction"]): r["per_call_s"] for r in summary
           if r["framework"] == REFERENCE and r["size"] == largest
           and r["direction"] == "forward"}  # fmt: skip
    return [f"warning: {r['framework']} ({r['env']}) {r['direction']} at {_size(largest)} takes "
            f"{r['ratio']:.2f}x the numpy build: queued work not waited for?"
            for r in summary if r["size"] == largest and (r["env"], r["direction"]) in ref
            and r["per_call_s"] < 0.67 * ref[(r["env"], r["direction"])]]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=5, help="fresh worker processes")
    parser.add_argument("--rounds", type=int, default=7, help="rounds per process and size")
    parser.add_argument(
        "--sizes",
        type=_ints,
        default=list(SIZES),
        help="comma-separated element counts (default 1 to 1M, decades)",
    )
    parser.add_argument(
        "--directions",
        type=_names(DIRECTIONS),
        default=list(DIRECTIONS),
        help="comma-separated: forward, backward (default both)",
    )
    parser.add_argument(
        "--frameworks",
        type=_names(None),
        default=None,
        help="comma-separated glue names (default: every installed one; "
        "numpy, the reference, always runs)",
    )
    parser.add_argument("--kernel", choices=tuple(KERNELS), default="scaled_relu")
    parser.add_argument(
        "--block-s", type=float, default=0.05, help="seconds per block of the fastest framework"
    )
    parser.add_argument(
        "--batch-s",
        type=float,
        default=0.0005,
        help="seconds per timed batch of calls (between two clock reads)",
    )
    parser.add_argument("--cache", type=Path, default=None, help="the build cache folder")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument(
        "--combine",
        type=Path,
        nargs="+",
        default=None,
        metavar="JSON",
        help="merge the --out files of several environments: table and plot",
    )
    parser.add_argument(
        "--svg",
        type=Path,
        default=SVG_PATH,
        help="where --combine writes the plot (default docs/img/...)",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--source", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)  # fmt: skip
    for name in ("processes", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    for name in ("block_s", "batch_s"):
        if not getattr(args, name) > 0:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    if args.worker:
        json.dump(worker(args), sys.stdout)
        print()
        return 0
    if args.combine:
        results = []
        for path in args.combine:
            try:
                results.append(json.loads(path.read_text()))
            except (OSError, ValueError) as exc:
                parser.error(f"cannot read {path}: {exc}")
        envs = [r["env"] for r in results]
        if len(set(envs)) != len(envs):
            parser.error(f"two results from the same environment: {', '.join(envs)}")
        summary = [row for r in results for row in r["summary"]]
        title = f"One C++ kernel ({results[0]['kernel']}) in each framework"
        args.svg.parent.mkdir(parents=True, exist_ok=True)
        args.svg.write_text(svg_plot(summary, title))
        print("\n".join(report(results)))
        print(f"\nplot: {args.svg}")
        if args.out:
            combined = {"combined": [str(p) for p in args.combine], "summary": summary,
                        "traits": characterize(summary)}  # fmt: skip
            args.out.write_text(json.dumps(combined, indent=2) + "\n")
        return 0
    result = run(args)
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
        return 0
    print("\n".join(report([result])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
