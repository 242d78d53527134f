"""What `d5 bench op` adds to an operator's time, against a hand-written timing loop.

For every problem of the cpu-small GEMM and convolution suites, on the numpy, torch and
tensorflow backends, the same computation is timed two ways, side by side and
interleaved:

- d5: what each worker of ``d5 bench op`` runs for one job, here in this process
  (``build_job`` of the ``op`` kind: backend lookup, operator wrapper,
  ``prepare_forward``'s callable; then the measurement engine with its adaptive
  stopping), so that both sides share the process they are timed in;
- by hand: a ``perf_counter_ns`` loop around the framework's own call: ``torch.mm`` /
  ``F.conv2d`` under ``no_grad`` for torch; for tensorflow, ``tf.linalg.matmul`` (with
  its ``transpose_a``/``transpose_b`` flags) / ``tf.nn.conv2d`` in a ``tf.function``, on
  tensors made beforehand, the convolution in NHWC with an HWIO kernel as TensorFlow's
  CPU kernels want (``"SAME"``/``"VALID"`` padding where that is the ONNX padding,
  explicit padding otherwise), called two ways, each its own row: through the
  function's concrete function (``get_concrete_function``, which d5's TensorFlow
  operators call too; row ``tensorflow``), and as users usually call it, ``fn(a, b)``,
  which matches the arguments to a traced signature on every call (row ``tensorflow,
  hand: tf.function call``); ``tensorflow-xla``, when asked for, against the same
  ``tf.function`` with ``jit_compile=True``; for numpy, the reference operator's own
  ``forward`` called directly (numpy has no convolution, and the reference GEMM computes
  ``alpha * (A @ B)``, whose extra pass over the output is arithmetic, not harness).

The hand calls of torch and tensorflow are first checked against the numpy reference
(same result to float32 rounding), so that both sides compute the same thing.

It prints the ratio of medians (target <= 1.02) and the time added per call (target
<= 5 µs). For the tensorflow backends it then times the operator wrapper alone, paired
(:func:`paired_wrapper`): TensorFlow's time per call moves by tens of µs between the
end-to-end rounds, more than the effect measured.

    .venv/bin/python benchmarks/op_overhead.py [--rounds 3] [--backends numpy,torch,tensorflow]
        [--json]

The default backends are numpy, torch and, when its plugin is installed, tensorflow.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from _machine import load, machine

from d5core.lv0.jobs import problem_to_json
from d5core.lv0.runner import backend_by_name, build_operator
from d5core.lv0.workloads.problems import Problem, suite
from d5core.measure.engine import Measurement, MeasureOptions, measure
from d5core.measure.invocations import build_job, job_target
from d5core.plugins import get_plugin_manager

#: Backends with a hand-written side here.
BACKENDS = ("numpy", "torch", "tensorflow", "tensorflow-xla")
#: How the hand side calls its ``tf.function``: through its traced concrete function
#: (``get_concrete_function``, as d5's TensorFlow operators do: no argument matching),
#: or as users usually do, ``fn(a, b)``, which matches the arguments to a traced
#: signature on every call. Both are measured for the tensorflow backends.
CONCRETE, FUNCTION_CALL = "concrete function", "tf.function call"
TF_CALLS = (CONCRETE, FUNCTION_CALL)
#: The one way numpy and torch are called.
DIRECT = "direct call"


def hand_loop(fn: Callable[[], Any], samples: int, warmup: int = 3) -> float:
    """Median seconds per call of a plain loop, as someone would write it by hand."""
    for _ in range(warmup):
        fn()
    gc.disable()
    try:
        times = []
        for _ in range(samples):
            t0 = time.perf_counter_ns()
            fn()
            times.append(time.perf_counter_ns() - t0)
    finally:
        gc.enable()
    return statistics.median(times) / 1e9


def native_call(
    problem: Problem, backend: str, inputs: list[np.ndarray], how: str = DIRECT
) -> Callable[[], Any]:
    """The framework's own call for ``problem``, inputs converted beforehand (``how``:
    see :data:`TF_CALLS`; tensorflow only)."""
    attrs = problem.attributes
    if backend == "torch":
        tensors = [torch.from_numpy(a) for a in inputs]
        if problem.op == "Gemm":
            a, b = tensors
            a = a.t() if attrs.get("transA") else a
            b = b.t() if attrs.get("transB") else b

            def gemm() -> Any:
                with torch.no_grad():
                    return torch.mm(a, b)

            return gemm
        x, w = tensors
        pads, strides = attrs["pads"], attrs["strides"]

        def conv() -> Any:
            with torch.no_grad():
                return F.conv2d(x, w, stride=strides, padding=(pads[0], pads[1]))

        return conv
    if backend.startswith("tensorflow"):
        return tf_call(problem, inputs, xla=backend == "tensorflow-xla", how=how)
    op = build_operator(backend_by_name("numpy"), problem, "float32", inputs)
    return lambda: op.forward(inputs)


def tf_call(
    problem: Problem, inputs: list[np.ndarray], *, xla: bool, how: str
) -> Callable[[], Any]:
    """``tf.linalg.matmul`` or ``tf.nn.conv2d`` in a ``tf.function`` (NHWC, HWIO kernel),
    on tensors made now; ``jit_compile=xla``; called as ``how`` says."""
    from d5_plugin_tensorflow._tf import tensorflow

    tf = tensorflow()
    attrs = problem.attributes
    if problem.op == "Gemm":
        a, b = (tf.constant(v) for v in inputs)
        ta, tb = bool(attrs.get("transA")), bool(attrs.get("transB"))

        @tf.function(jit_compile=xla)
        def gemm(a: Any, b: Any) -> Any:
            return tf.linalg.matmul(a, b, transpose_a=ta, transpose_b=tb)

        return _called(gemm, (a, b), how)
    x = tf.constant(np.ascontiguousarray(inputs[0].transpose(0, 2, 3, 1)))
    w = tf.constant(np.ascontiguousarray(inputs[1].transpose(2, 3, 1, 0)))
    pads, strides = list(attrs["pads"]), list(attrs["strides"])
    kernel = inputs[1].shape[2:]
    padding: Any = [[0, 0], [pads[0], pads[2]], [pads[1], pads[3]], [0, 0]]
    if not any(pads):
        padding = "VALID"
    elif strides == [1, 1] and all(pads[i] == pads[i + 2] == k // 2 for i, k in enumerate(kernel)):
        padding = "SAME"  # what TensorFlow calls the ONNX padding of an odd kernel

    @tf.function(jit_compile=xla)
    def conv(x: Any, w: Any) -> Any:
        return tf.nn.conv2d(x, w, strides=[1, *strides, 1], padding=padding)

    return _called(conv, (x, w), how)


def _called(function: Any, args: tuple[Any, ...], how: str) -> Callable[[], Any]:
    """A call of the ``tf.function`` ``function`` on ``args``, as ``how`` says."""
    if how == FUNCTION_CALL:
        return lambda: function(*args)
    concrete = function.get_concrete_function(*args)
    return lambda: concrete(*args)


def check_hand(problem: Problem, backend: str, inputs: list[np.ndarray]) -> None:
    """Refuse a hand call that does not compute what the reference operator does."""
    if backend == "numpy":
        return
    reference = build_operator(backend_by_name("numpy"), problem, "float32", inputs)
    (expected,) = reference.forward(inputs)
    got = np.asarray(native_call(problem, backend, inputs)())
    if problem.op == "Conv" and backend.startswith("tensorflow"):
        got = got.transpose(0, 3, 1, 2)  # NHWC back to NCHW
    scale = float(np.max(np.abs(expected)))
    if got.shape != expected.shape or not np.allclose(got, expected, rtol=0, atol=1e-4 * scale):
        raise SystemExit(
            f"{backend} {problem.label}: the hand-written call does not compute what the "
            "reference does; nothing would be compared"
        )


def paired_wrapper(
    problem: Problem, backend: str, inputs: list[np.ndarray], rounds: int, calls: int
) -> dict[str, Any]:
    """d5's operator wrapper alone against the framework's call, in one process: the
    callable ``prepare_forward`` returns (what the engine times) and the hand call, each
    run for ``calls`` calls per block, both blocks in every round in alternating order.
    Without the engine and its adaptive stopping on d5's side, the ratio of two blocks
    taken back to back is what the wrapper adds, resolved finer than TensorFlow's
    variance between the end-to-end rounds allows."""
    op = build_operator(backend_by_name(backend), problem, "float32", inputs)
    prepared = op.prepare_forward(inputs)
    hand = native_call(problem, backend, inputs, CONCRETE)
    sides = {"d5": prepared, "hand": hand}
    blocks: dict[str, list[float]] = {"d5": [], "hand": []}
    for fn in sides.values():
        hand_loop(fn, samples=calls)  # warm-up
    for r in range(rounds):
        for who in ("d5", "hand") if r % 2 == 0 else ("hand", "d5"):
            blocks[who].append(hand_loop(sides[who], samples=calls, warmup=0))
    pairs = list(zip(blocks["d5"], blocks["hand"], strict=True))
    ratios = [d / h for d, h in pairs]
    return {
        "problem": problem.label,
        "backend": backend,
        "d5_median_s": statistics.median(blocks["d5"]),
        "hand_median_s": statistics.median(blocks["hand"]),
        "ratio": statistics.median(ratios),
        "ratio_range": [min(ratios), max(ratios)],
        "added_us": statistics.median((d - h) * 1e6 for d, h in pairs),
    }


def default_backends() -> list[str]:
    """numpy, torch, and tensorflow where its plugin is installed."""
    registered = get_plugin_manager().names("d5.operators")
    return ["numpy", "torch"] + (["tensorflow"] if "tensorflow" in registered else [])


def _backends(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    bad = [n for n in names if n not in BACKENDS]
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"{bad[0] if bad else text!r} is not one of {', '.join(BACKENDS)}"
        )
    return names


def d5_job(problem: Problem, backend: str, options: MeasureOptions) -> Measurement:
    """One job of ``d5 bench op``, built and measured as its worker does."""
    args = {"problem": problem_to_json(problem), "backend": backend, "dtype": "float32",
            "direction": "forward", "seed": 0}  # fmt: skip
    prepared = build_job(job_target("op"), args)
    return measure(prepared.fn, options, synchronize=prepared.synchronize)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--time-budget", type=float, default=2.0)
    parser.add_argument(
        "--backends", type=_backends, default=None,
        help=f"comma-separated, from {', '.join(BACKENDS)} (default: numpy, torch and "
        "tensorflow when its plugin is installed)",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    backends = args.backends or default_backends()
    torch.set_num_threads(torch.get_num_threads())
    options = MeasureOptions(time_budget_s=args.time_budget, max_samples=400, min_samples=30)
    problems = suite("cpu-small-gemm") + suite("cpu-small-conv")
    rows = []
    for problem in problems:
        inputs = problem.make_inputs("float32", 0)
        for backend in backends:
            check_hand(problem, backend, inputs)
            hows = TF_CALLS if backend.startswith("tensorflow") else (DIRECT,)
            # a tf.function traces once, here
            hands = {how: native_call(problem, backend, inputs, how) for how in hows}
            sides = ["d5", *hows]
            d5_medians: list[float] = []
            hand_medians: dict[str, list[float]] = {how: [] for how in hows}
            for r in range(args.rounds):
                # rotated per round: with one hand side, d5 and hand alternate going first
                for who in sides[r % len(sides) :] + sides[: r % len(sides)]:
                    if who == "d5":
                        timed = d5_job(problem, backend, options)
                        d5_medians.append(timed.summary.median)
                        n = timed.summary.n
                    else:
                        samples = max(30, min(n, 400))
                        hand_medians[who].append(hand_loop(hands[who], samples=samples))
            for how in hows:
                # Paired by round: each ratio compares two measurements taken back to
                # back, so drifts of the machine between rounds cancel.
                pairs = list(zip(d5_medians, hand_medians[how], strict=True))
                ratios = [d / h for d, h in pairs]
                added = [d - h for d, h in pairs]
                d5_t, hand_t = statistics.median(d5_medians), statistics.median(hand_medians[how])
                label = backend if how in (DIRECT, CONCRETE) else f"{backend}, hand: {how}"
                rows.append(
                    {
                        "problem": problem.label,
                        "backend": label,
                        "d5_median_s": d5_t,
                        "hand_median_s": hand_t,
                        "ratio": statistics.median(ratios),
                        "ratio_range": [min(ratios), max(ratios)],
                        "added_us": statistics.median(added) * 1e6,
                    }
                )
                print(
                    f"{label:>5} {problem.label}: d5 {d5_t * 1e6:.1f} µs, "
                    f"hand {hand_t * 1e6:.1f} µs",
                    file=sys.stderr,
                )
    paired = [
        paired_wrapper(problem, backend, problem.make_inputs("float32", 0), 60, 300)
        for problem in problems
        for backend in backends
        if backend.startswith("tensorflow")
    ]
    versions = f"torch {torch.__version__}, numpy {np.__version__}"
    if any(b.startswith("tensorflow") for b in backends):
        from d5_plugin_tensorflow import _tf

        found = _tf.settings() or {}
        versions += (
            f", tensorflow {_tf.tensorflow().__version__} (intra-op "
            f"{found.get('intra_op_parallelism_threads')}, inter-op "
            f"{found.get('inter_op_parallelism_threads')} threads)"
        )
    where = f"{machine()}, {versions}; {load()}"
    if args.json:
        print(json.dumps({"machine": where, "rows": rows, "paired": paired}, indent=2))
        return 0
    print(f"machine: {where}; {args.rounds} interleaved rounds\n")
    print(
        "| backend | problem | d5 median (µs) | hand-loop median (µs) | "
        "ratio (median of rounds) | ratio range | added per call (µs) |"
    )
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['backend']} | {row['problem']} | {row['d5_median_s'] * 1e6:.1f} | "
            f"{row['hand_median_s'] * 1e6:.1f} | {row['ratio']:.3f} | "
            f"{row['ratio_range'][0]:.3f}–{row['ratio_range'][1]:.3f} | {row['added_us']:+.2f} |"
        )
    ratios = [r["ratio"] for r in rows]
    small = [r["added_us"] for r in rows if r["hand_median_s"] < 2e-4]
    fast = f"max {max(small):+.2f} µs" if small else "no such call"
    print(
        f"\nratio of medians: median {statistics.median(ratios):.3f}, max {max(ratios):.3f}; "
        f"added per call where a call takes under 200 µs: {fast}"
    )
    if paired:
        print(
            "\nThe operator wrapper alone (prepare_forward's callable against the concrete "
            "function; 60 rounds of 300-call blocks, alternating):\n"
        )
        print(
            "| backend | problem | d5 median (µs) | hand median (µs) | ratio | range | added (µs) |"
        )
        print("|---|---|---|---|---|---|---|")
        for row in paired:
            print(
                f"| {row['backend']} | {row['problem']} | {row['d5_median_s'] * 1e6:.1f} | "
                f"{row['hand_median_s'] * 1e6:.1f} | {row['ratio']:.3f} | "
                f"{row['ratio_range'][0]:.3f}–{row['ratio_range'][1]:.3f} | "
                f"{row['added_us']:+.2f} |"
            )
        print(
            f"\nwrapper alone: ratio max {max(r['ratio'] for r in paired):.3f}, added per "
            f"call max {max(r['added_us'] for r in paired):+.2f} µs"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
