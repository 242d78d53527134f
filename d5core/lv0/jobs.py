"""Level 0's measurement jobs: one operator on one problem, built in the measurement
worker (the ``op`` kind of the ``d5_worker_jobs`` hook), and problems as JSON."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from d5core.lv0.workloads.problems import InputSpec, Problem
from d5core.measure.invocations import PreparedJob

if TYPE_CHECKING:
    from d5core.lv0.timed_accuracy import TimedAccuracy
    from d5core.measure.audit import OutputSample

__all__ = [
    "RANDOM_OPERATORS",
    "op_job",
    "operator_details",
    "problem_from_json",
    "problem_to_json",
    "timed_check",
    "untimed_outputs",
]


# -- problems as JSON ------------------------------------------------------------------------

_TUPLE = "__tuple__"


def _encode(value: Any) -> Any:
    """JSON-ready ``value`` with tuples marked, so that they come back as tuples."""
    if isinstance(value, tuple):
        return {_TUPLE: [_encode(v) for v in value]}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _encode(v) for k, v in value.items()}
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if isinstance(value, Mapping):
        if set(value) == {_TUPLE}:
            return tuple(_decode(v) for v in value[_TUPLE])
        return {k: _decode(v) for k, v in value.items()}
    return value


def problem_to_json(problem: Problem) -> dict[str, Any]:
    """``problem`` as JSON that :func:`problem_from_json` turns back into an equal problem."""
    return {
        "op": problem.op,
        "inputs": [_encode(dataclasses.asdict(spec)) for spec in problem.inputs],
        "attributes": _encode(dict(problem.attributes)),
        "name": problem.name,
        "flops": problem.flops,
    }


def problem_from_json(data: Mapping[str, Any]) -> Problem:
    """The problem :func:`problem_to_json` wrote."""
    inputs = []
    for spec in data["inputs"]:
        values = _decode(spec)
        values["shape"] = tuple(values["shape"])
        values["value"] = tuple(values.get("value") or ())
        inputs.append(InputSpec(**values))
    return Problem(
        op=str(data["op"]),
        inputs=tuple(inputs),
        attributes=_decode(data.get("attributes") or {}),
        name=str(data.get("name") or ""),
        flops=int(data.get("flops") or 0),
    )


def op_job(
    problem: Mapping[str, Any], backend: str, dtype: str, direction: str, seed: int
) -> PreparedJob:
    """What :func:`~d5core.lv0.bench_run.bench_operators` times for one backend, problem and
    direction: the operator built on the seeded inputs, prepared for ``direction``; the
    preparation's time is ``details["prepare_s"]``."""
    from d5core.lv0.runner import backend_by_name, build_operator, preparation
    from d5core.lv0.timed_accuracy import job_check
    from d5core.measure.engine import synchronizer_of, timed_call

    made = problem_from_json(problem)
    inputs = made.make_inputs(dtype, seed)
    operator = build_operator(backend_by_name(backend), made, dtype, inputs)
    synchronize = synchronizer_of(operator)
    fn, prepare_s = timed_call(preparation(operator, direction, inputs, seed), synchronize)
    return PreparedJob(
        fn=fn,
        synchronize=synchronize,
        details={**operator_details(operator), "prepare_s": prepare_s},
        check=job_check(timed_check(operator, made.op, direction, inputs, seed, fn)),
    )


#: Operators whose outputs are random by definition: two calls differ, so the outputs
#: of timed calls cannot be compared with an untimed one.
RANDOM_OPERATORS = frozenset(
    {
        "Bernoulli",
        "Dropout",
        "Multinomial",
        "RandomNormal",
        "RandomNormalLike",
        "RandomUniform",
        "RandomUniformLike",
    }
)


def untimed_outputs(
    operator: Any, direction: str, inputs: Sequence[np.ndarray], seed: int
) -> list[np.ndarray]:
    """What the timed callable of ``direction`` must return, by the operator's untimed
    path on the same inputs: its forward outputs, or the gradients of its
    differentiable inputs (in input order) for the output gradients ``prepare`` uses."""
    from d5core.validate.operators import default_grad_outputs

    arrays = list(inputs)
    outputs = [np.asarray(o) for o in operator.forward(arrays)]
    if direction == "forward":
        return outputs
    grads = default_grad_outputs(outputs, seed)
    found = operator.backward(grads, arrays, outputs)
    return [np.asarray(g) for g in found if g is not None]


def timed_check(
    operator: Any,
    op: str,
    direction: str,
    inputs: Sequence[np.ndarray],
    seed: int,
    fn: Callable[[], object],
) -> Callable[[OutputSample], TimedAccuracy]:
    """Accuracy while timed for one operator job: the check that the sampled return
    values of ``fn`` equal :func:`untimed_outputs` (computed after timing)."""
    from d5core.lv0.timed_accuracy import TimedAccuracy, check_sampled

    to_numpy = getattr(fn, "to_numpy", None)

    def check(sample: OutputSample) -> TimedAccuracy:
        sampled = sample.outputs
        if op in RANDOM_OPERATORS or operator.op_type in RANDOM_OPERATORS:
            return TimedAccuracy("unchecked", detail=f"{op} is random: two calls differ")
        expected = untimed_outputs(operator, direction, inputs, seed)
        return check_sampled(sampled, expected, to_numpy=to_numpy if callable(to_numpy) else None)

    return check


def operator_details(operator: Any) -> dict[str, Any]:
    """``operator.details()`` as a plain dict; empty for an operator without the method
    (one written before plugin API 1.2) or when it raises (the timing is still good)."""
    found = getattr(operator, "details", None)
    if not callable(found):
        return {}
    try:
        return dict(found())
    except Exception:
        return {}
