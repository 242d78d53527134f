"""Which direction is better, and in which unit, for every quantity d5 stores.

Each metric class declares its ``unit`` and ``better`` (see
:class:`~d5core.levels.metrics.Metric`). d5's commands also store measurements and
scalars under names of their own (``time``, ``step_time``, ``loss``, ``passed``, ...).
:data:`QUANTITIES` lists both; :func:`better_of` answers for any name and unit. A name it
does not list is judged by its ending (:data:`SUFFIXES`: ``val_accuracy`` is better
higher, ``val_loss`` and ``max_abs_error`` lower), then by its unit: times, bytes and
joules are costs (better lower) and rates (``samples/s``, ``GFLOP/s``) are better higher.
When none of these tells, the answer is ``None``: a change is then reported as higher or
lower, never as better or worse.
"""

from __future__ import annotations

from typing import Literal

from d5core.errors import UsageError

__all__ = [
    "BETTER",
    "COST_UNITS",
    "QUANTITIES",
    "SUFFIXES",
    "Better",
    "better_of",
    "check_better",
]

#: Which direction is better.
Better = Literal["lower", "higher"]
#: The values :data:`Better` takes.
BETTER: tuple[Better, ...] = ("lower", "higher")
#: Units of costs, better lower whatever they measure.
COST_UNITS: frozenset[str] = frozenset({"s", "ms", "us", "µs", "ns", "B", "bytes", "J"})

_TIME, _RATE, _FRACTION, _QPS = "s", "samples/s", "fraction", "queries/s"

#: Every quantity d5 itself stores or computes: name -> (better direction, unit).
#: ``None`` marks quantities with no better direction (counts such as ``steps``).
QUANTITIES: dict[str, tuple[Better | None, str]] = {
    # The built-in metrics (d5core.metrics): the same as each class declares.
    "wallclock_time": ("lower", _TIME),
    "latency": ("lower", _TIME),
    "throughput": ("higher", _RATE),
    "peak_memory": ("lower", "B"),
    "cpu_utilization": ("higher", "%"),
    "energy": ("lower", "J"),
    "communication_volume": ("lower", "B"),
    "training_accuracy": ("higher", _FRACTION),
    "test_accuracy": ("higher", _FRACTION),
    "final_test_accuracy": ("higher", _FRACTION),
    "best_test_accuracy": ("higher", _FRACTION),
    "time_to_accuracy": ("lower", _TIME),
    "validation_perplexity": ("lower", "perplexity"),
    "final_perplexity": ("lower", "perplexity"),
    "best_perplexity": ("lower", "perplexity"),
    "time_to_perplexity": ("lower", _TIME),
    "time_to_loss": ("lower", _TIME),
    "time_to_target_training": ("lower", _TIME),
    "eval_time": ("lower", _TIME),
    "final_test_loss": ("lower", "loss"),
    "best_test_loss": ("lower", "loss"),
    "loss_curve": ("lower", "loss"),
    "numerical_error": ("lower", "1"),
    "determinism": ("lower", "1"),
    # What `d5 bench` and `d5 run` store.
    "time": ("lower", _TIME),
    "step_time": ("lower", _TIME),
    "wall_time": ("lower", _TIME),
    "loss": ("lower", "loss"),
    "final_loss": ("lower", "loss"),
    "global_throughput": ("higher", _RATE),
    "gflops": ("higher", "GFLOP/s"),
    "peak_gflops": (None, "GFLOP/s"),
    "peak_fraction": ("higher", _FRACTION),
    "node_time": ("lower", _TIME),
    "node_time_sum": ("lower", _TIME),
    "steps": (None, ""),
    "epochs": (None, ""),
    # The roofline inputs `d5 bench op` stores: sizes and the machine's bounds.
    "peak_bandwidth": (None, "GB/s"),
    "problem_flops": (None, "FLOP"),
    "problem_bytes": (None, "B"),
    # What `d5 bench comm` stores at each message size.
    "algbw": ("higher", "GB/s"),
    "busbw": ("higher", "GB/s"),
    # Per rank of a distributed run.
    "rank_steps": (None, ""),
    "rank_samples": (None, ""),
    "rank_bytes_sent": ("lower", "B"),
    "rank_bytes_received": ("lower", "B"),
    "rank_comm_time": ("lower", _TIME),
    "rank_final_loss": ("lower", "loss"),
    "rank_wall_time": ("lower", _TIME),
    # What `d5 bench net --scenario` stores (MLPerf LoadGen; docs/inference.md).
    "latency_p50": ("lower", _TIME),
    "latency_p90": ("lower", _TIME),
    "latency_p95": ("lower", _TIME),
    "latency_p97": ("lower", _TIME),
    "latency_p99": ("lower", _TIME),
    "latency_p99.9": ("lower", _TIME),
    "early_stopping_latency_p90": ("lower", _TIME),
    "early_stopping_latency_p99": ("lower", _TIME),
    "qps": ("higher", _QPS),
    "qps_without_overhead": ("higher", _QPS),
    "peak_server_qps": ("higher", _QPS),
    "valid": ("higher", ""),
    "accuracy_passed": ("higher", ""),
    # What `d5 validate` stores: 1 for passed, and errors against the reference.
    "passed": ("higher", ""),
    "l1": ("lower", ""),
    "l2": ("lower", ""),
    "rel_l1": ("lower", ""),
    "rel_l2": ("lower", ""),
    "max_abs": ("lower", ""),
    "max_rel": ("lower", ""),
    "nonfinite": ("lower", ""),
    "tol_ratio": ("lower", ""),
}


#: Endings of names not in :data:`QUANTITIES` that tell the direction, checked in order.
SUFFIXES: tuple[tuple[str, Better], ...] = (
    ("accuracy", "higher"),
    ("loss", "lower"),
    ("perplexity", "lower"),
    ("error", "lower"),
    ("latency", "lower"),
    ("time", "lower"),
)


def better_of(name: str, unit: str = "") -> Better | None:
    """Which direction is better for quantity ``name`` measured in ``unit``.

    The name decides when :data:`QUANTITIES` lists it or it ends as one of
    :data:`SUFFIXES`; otherwise the unit: a unit in :data:`COST_UNITS` is better lower,
    a rate (``.../s``) better higher. ``None`` when none of these tells.
    """
    if name in QUANTITIES:
        return QUANTITIES[name][0]
    lowered = name.lower()
    for suffix, better in SUFFIXES:
        if lowered.endswith(suffix):
            return better
    if unit in COST_UNITS:
        return "lower"
    if unit.endswith("/s"):
        return "higher"
    return None


def check_better(value: str | None, what: str) -> Better | None:
    """``value`` if it is ``"lower"``, ``"higher"`` or ``None``.

    :param what: what the direction belongs to, for the error message.
    :raises UsageError: for anything else.
    """
    if value is None:
        return None
    if value == "lower":
        return "lower"
    if value == "higher":
        return "higher"
    raise UsageError(f"better for {what} must be 'lower' or 'higher', not {value!r}")
