"""Level 0's measurement jobs: one operator on one problem, built in the measurement
worker (the ``op`` kind of the ``d5_worker_jobs`` hook), and problems as JSON."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from d5core.lv0.workloads.problems import InputSpec, Problem
from d5core.measure.invocations import PreparedJob

__all__ = ["op_job", "operator_details", "problem_from_json", "problem_to_json"]


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
    direction: the operator built on the seeded inputs, prepared for ``direction``."""
    from d5core.lv0.runner import backend_by_name, build_operator, prepare
    from d5core.measure.engine import synchronizer_of

    made = problem_from_json(problem)
    inputs = made.make_inputs(dtype, seed)
    operator = build_operator(backend_by_name(backend), made, dtype, inputs)
    fn = prepare(operator, direction, inputs, seed)
    return PreparedJob(
        fn=fn, synchronize=synchronizer_of(operator), details=operator_details(operator)
    )


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
