"""The measurement job of ``d5 audit op``'s caching check: one operator timed call by
call, each call on a callable prepared just before it (outside the timed region), with
fresh inputs every call or with the same input arrays every call.

Both modes do the same work between calls (make an input set, prepare a callable), so
that the only difference the timing can see is whether the inputs were seen before: a
backend that caches results, keyed on the input objects or on their values, answers the
repeated inputs faster (MLPerf's TEST04). The outputs of a few timed calls are checked
against the untimed outputs on that call's own inputs, which catches a callable that
returns outputs made for other inputs (stale outputs).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from d5core.measure.invocations import PreparedJob

if TYPE_CHECKING:
    from d5core.lv0.timed_accuracy import TimedAccuracy
    from d5core.measure.audit import OutputSample

__all__ = ["FRESH_SEED_OFFSET", "Rotation", "audit_op_job"]

#: Fresh input sets use seeds from ``seed + FRESH_SEED_OFFSET`` on, one per timed call.
FRESH_SEED_OFFSET = 1_000_003


class Rotation:
    """The callable a caching check times: before each sample (``setup``) it prepares
    the next callable, on fresh inputs or on the same ones; the timed ``fn`` calls it."""

    def __init__(self, mode: str, make: Callable[[int], Any], prepare: Callable[[Any], Any]):
        if mode not in ("fresh", "same"):
            raise ValueError(f"mode must be fresh or same, got {mode!r}")
        self.mode = mode
        self._make = make
        self._prepare = prepare
        self.base = make(0)
        self.current = prepare(self.base)
        #: Calls of :meth:`setup` so far; the sample ``p`` runs on input set ``p + 1``.
        self.count = 0

    def inputs_of(self, position: int) -> Any:
        """The inputs the timed sample ``position`` ran on."""
        return self._make(position + 1) if self.mode == "fresh" else self.base

    def setup(self) -> None:
        """Prepare the next callable (outside the timed region)."""
        self.count += 1
        made = self._make(self.count)  # made in both modes: the same work between calls
        self.current = self._prepare(made if self.mode == "fresh" else self.base)

    def fn(self) -> object:
        """One timed call of the callable prepared last."""
        return self.current()


def audit_op_job(
    problem: Mapping[str, Any], backend: str, dtype: str, direction: str, seed: int, mode: str
) -> PreparedJob:
    """One operator timed call by call, on fresh inputs (``mode="fresh"``) or the same
    inputs (``"same"``) every call; see the module docstring."""
    from d5core.lv0.jobs import (
        RANDOM_OPERATORS,
        operator_details,
        problem_from_json,
        untimed_outputs,
    )
    from d5core.lv0.runner import backend_by_name, build_operator, prepare
    from d5core.lv0.timed_accuracy import TimedAccuracy, check_sampled, job_check
    from d5core.measure.engine import synchronizer_of

    made = problem_from_json(problem)

    def make(k: int) -> Any:
        return made.make_inputs(dtype, seed if k == 0 else seed + FRESH_SEED_OFFSET + k)

    first = make(0)
    operator = build_operator(backend_by_name(backend), made, dtype, first)
    rotation = Rotation(mode, make, lambda inputs: prepare(operator, direction, inputs, seed))

    def check(sample: OutputSample) -> TimedAccuracy:
        if made.op in RANDOM_OPERATORS:
            return TimedAccuracy("unchecked", detail=f"{made.op} is random: two calls differ")
        to_numpy = getattr(rotation.current, "to_numpy", None)
        found = TimedAccuracy("unchecked", detail="no timed output was sampled")
        for k, (position, value) in enumerate(
            zip(sorted(sample.positions), sample.outputs, strict=False)
        ):
            want = untimed_outputs(operator, direction, rotation.inputs_of(position), seed)
            found = check_sampled([value], want, to_numpy=to_numpy if callable(to_numpy) else None)
            if found.status != "pass":
                return found
            found.checked = k + 1
        return found

    return PreparedJob(
        fn=rotation.fn,
        setup=rotation.setup,
        synchronize=synchronizer_of(operator),
        details={**operator_details(operator), "audit_mode": mode},
        check=job_check(check),
    )
