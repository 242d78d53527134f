"""What publishing on the metric bus costs (targets: < 150 ns unobserved, < 1 µs observed).

Each case runs one bus operation 1000 times in a loop unrolled tenfold, timed by d5's
own measurement engine; the figures are nanoseconds per operation (median and the 95%
CI of the median), loop share included. A call of an empty function with the same
argument is measured beside them as the floor any Python-level API pays.

    .venv/bin/python benchmarks/bus_overhead.py [--budget 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from _machine import load, machine

from d5core.bus import OP_FORWARD, Event, MetricBus
from d5core.measure import Measurement, MeasureOptions, measure

OPS = 1000
UNROLL = 10


class TimingSubscriber:
    """What a timing metric does with an event: read its duration, add it up."""

    def __init__(self) -> None:
        self.total = 0
        self.count = 0

    def __call__(self, event: Event) -> None:
        self.total += event.payload.get("duration_ns", event.t_ns)
        self.count += 1


def repeated(statement: str, env: dict[str, Any]) -> Callable[[], None]:
    """A function running ``statement`` OPS times (a loop of OPS/UNROLL, unrolled)."""
    body = "\n".join(f"        {line}" for _ in range(UNROLL) for line in statement.split("\n"))
    source = f"def run():\n    for _ in LOOP:\n{body}\n"
    namespace = dict(env, LOOP=range(OPS // UNROLL))
    exec(source, namespace)
    fn: Callable[[], None] = namespace["run"]
    return fn


def cases() -> list[tuple[str, str, Callable[[], None], float | None]]:
    """(case, what listens, function, target ns) for every measured case."""
    quiet = MetricBus()
    quiet.subscribe("other.event", TimingSubscriber())  # a bus with unrelated listeners
    heard = MetricBus()
    heard.subscribe(OP_FORWARD, TimingSubscriber())
    spans = MetricBus()
    spans.subscribe(OP_FORWARD + ".end", TimingSubscriber())

    def empty(name: str) -> None:
        pass

    def span_env(bus: MetricBus) -> dict[str, Any]:
        return {"span": bus.span, "NAME": OP_FORWARD}

    return [
        (
            "empty function call `f(NAME)`",
            "-",
            repeated("f(NAME)", {"f": empty, "NAME": OP_FORWARD}),
            None,
        ),
        (
            "`publish(NAME)`",
            "nobody",
            repeated("pub(NAME)", {"pub": quiet.publish, "NAME": OP_FORWARD}),
            150.0,
        ),
        (
            "`publish(NAME, bytes_sent=1, bytes_received=2)`",
            "nobody",
            repeated(
                "pub(NAME, bytes_sent=1, bytes_received=2)",
                {"pub": quiet.publish, "NAME": OP_FORWARD},
            ),
            150.0,
        ),
        (
            "`wants(NAME)`",
            "nobody",
            repeated("wants(NAME)", {"wants": quiet.wants, "NAME": OP_FORWARD}),
            150.0,
        ),
        (
            "`publish(NAME)`",
            "one timing subscriber",
            repeated("pub(NAME)", {"pub": heard.publish, "NAME": OP_FORWARD}),
            1000.0,
        ),
        (
            "`with span(NAME): pass`",
            "nobody",
            repeated("with span(NAME):\n    pass", span_env(quiet)),
            150.0,
        ),
        (
            "`with span(NAME): pass`",
            "one timing subscriber on `.end`",
            repeated("with span(NAME):\n    pass", span_env(spans)),
            1000.0,
        ),
    ]


def run_case(fn: Callable[[], None], budget: float) -> Measurement:
    return measure(fn, MeasureOptions(time_budget_s=budget, max_samples=2000))


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--budget", type=float, default=3.0, help="seconds per case")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    rows: list[dict[str, Any]] = []
    for case, listener, fn, target in cases():
        m = run_case(fn, args.budget)
        s = m.summary
        rows.append(
            {
                "case": case,
                "listener": listener,
                "ns_per_op": s.median / OPS * 1e9,
                "ci_ns": [s.ci_low / OPS * 1e9, s.ci_high / OPS * 1e9],
                "target_ns": target,
                "meets_target": None if target is None else s.ci_high / OPS * 1e9 < target,
                "samples": s.n,
                "block_size": m.block_size,
                "stability": s.stability,
            }
        )
    if args.json:
        out = {"machine": machine(), "load": load(), "ops_per_call": OPS, "results": rows}
        print(json.dumps(out))
        return 0
    print(f"machine: {machine()}; {load()} at the end")
    print()
    print("| operation | who listens | ns per op (median) | 95% CI | target | n |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        goal = (
            "-"
            if r["target_ns"] is None
            else (f"< {r['target_ns']:.0f} ns {'met' if r['meets_target'] else 'MISSED'}")
        )
        lo, hi = r["ci_ns"]
        print(
            f"| {r['case']} | {r['listener']} | {r['ns_per_op']:.1f} | "
            f"[{lo:.1f}, {hi:.1f}] | {goal} | {r['samples']} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
