"""The level-0 runner of ``d5 validate op``: validate an operator (or a custom operator
in each framework) and store each validation as a run of kind ``validate``.

The command (:mod:`d5core.lv0.validate_op_cmd`) reads the options and shows what these
functions return; the checks themselves are :func:`d5core.lv0.runner.validate_op` and
:func:`d5core.lv0.customop.runner.validate_custom`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from d5core.errors import UsageError
from d5core.validate.isolated import DEFAULT_TIMEOUT_S

if TYPE_CHECKING:
    from d5core.lv0.customop.runner import CustomValidation
    from d5core.lv0.runner import OperatorValidation

#: The check a validation worker runs for a plugin's operator.
OP_CHECK_TARGET = "d5core.lv0.runner:validate_op_in_worker"

__all__ = [
    "OP_CHECK_TARGET",
    "StoredCustomValidation",
    "StoredValidation",
    "store_validation",
    "validate_custom_and_store",
    "validate_op_and_store",
]


@dataclass(frozen=True)
class StoredValidation:
    """One operator validation and the id of the run it is stored as."""

    result: OperatorValidation
    run_id: str


@dataclass(frozen=True)
class StoredCustomValidation:
    """A custom operator's build and validations, with the run id of each validation
    (in the order of ``outcome.results``)."""

    outcome: CustomValidation
    run_ids: list[str]


def store_validation(
    store: Any,
    result: OperatorValidation,
    seed: int,
    tags: Sequence[str] = (),
    extra: Mapping[str, Any] | None = None,
) -> str:
    """Record one operator validation in ``store`` as a run of kind ``validate``, tagged
    ``tags``; its id. Metrics: ``passed`` and each check's finite figures, labelled by
    check and method. A validation whose worker died or timed out is stored ``failed``,
    with ``passed`` 0 and the cause as the run's error. ``extra`` joins the config (the
    time limit, what the forward was checked against).
    """
    config = {"op": result.op, "backend": result.backend, "dtype": result.dtype,
              "problem": result.problem, **(extra or {})}  # fmt: skip
    name = f"{result.op} {result.backend}"
    with store.run("validate", name, config=config, seed=seed, tags=tags) as run_id:
        store.add_metric(run_id, "passed", float(result.passed))
        for check in [*result.report.outputs, *result.report.gradients]:
            for metric, value in (check.metrics or {}).items():
                if math.isfinite(value):
                    labels = {"check": check.label, "method": getattr(check, "method", "")}
                    store.add_metric(run_id, metric, value, labels=labels)
        if result.worker_failure:
            store.finish_run(run_id, "failed", error=result.worker_failure)
        else:
            store.finish_run(run_id, "complete")
    return str(run_id)


def validate_op_and_store(
    op: str,
    backend: str,
    *,
    shapes: Sequence[tuple[int, ...]] | None,
    attributes: Mapping[str, Any],
    dtype: str,
    seed: int,
    tolerances: Any,
    db: str | Path | None,
    tags: Sequence[str] = (),
    timeout_s: float = DEFAULT_TIMEOUT_S,
    trace: str | None = None,
) -> StoredValidation:
    """Validate ``op`` of ``backend`` on its problem (the default one, reshaped to
    ``shapes`` when given) in a worker process killed after ``timeout_s`` seconds, and
    store the outcome as one run (the time limit in its config). A worker that dies or
    times out is a failed validation naming the signal and the phase. With ``trace``
    (a level), the worker is traced and the trace kept with the run.

    :raises UsageError: an operator without a default problem and no shapes, an unknown
        backend or operator, a store that cannot be written.
    """
    from d5core.lv0.customop.runner import _tolerances_json
    from d5core.lv0.jobs import problem_to_json
    from d5core.lv0.runner import OperatorValidation, problem_for, validation_from_json
    from d5core.results.store import ResultsStore
    from d5core.validate.isolated import run_isolated
    from d5core.validate.operators import ValidationReport

    problem = problem_for(op, shapes=shapes, attributes=attributes)
    with ResultsStore.open(db) as store:
        store.require_writable()
    args = {"problem": problem_to_json(problem), "backend": backend, "dtype": dtype,
            "seed": seed, "tolerances": _tolerances_json(tolerances)}  # fmt: skip
    extra: dict[str, Any] = {"timeout_s": timeout_s}
    if trace is not None:
        args["trace"] = extra["trace"] = trace
    outcome = run_isolated(OP_CHECK_TARGET, args, timeout_s=timeout_s)
    if outcome.usage:
        raise UsageError(outcome.failure)
    if outcome.failure:
        cause = f"{backend}: {outcome.failure}"
        report = ValidationReport(op_type=op, errors=[outcome.failure])
        result = OperatorValidation(op, backend, dtype, problem.label, "(not reached)", report,
                                    None, "", cause)  # fmt: skip
    else:
        result = validation_from_json(outcome.data)
    with ResultsStore.open(db) as store:
        run_id = store_validation(store, result, seed, tags, extra)
        if not outcome.failure:
            from d5core.trace.capture import keep_document

            keep_document(store, run_id, outcome.data.get("trace"))
    return StoredValidation(result, run_id)


def validate_custom_and_store(
    source: Path,
    frameworks: Sequence[str] | None,
    *,
    shapes: Sequence[tuple[int, ...]] | None,
    attributes: Mapping[str, Any],
    dtype: str,
    seed: int,
    tolerances: Any,
    db: str | Path | None,
    tags: Sequence[str] = (),
    on_note: Callable[[str], None] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    python_reference: Path | None = None,
) -> StoredCustomValidation:
    """Build the custom operator in ``source``, validate it in each of ``frameworks``
    (``None``: every installed one), each in a worker process of its own killed after
    ``timeout_s`` seconds, and store each validation as a run (the time limit in its
    config).

    The store is checked writable before anything is built.

    Every framework's forward is compared with the Python reference's ``forward``
    (``python_reference``, else ``SOURCE.py`` beside the source, if there is one); with
    none, a note and the stored config say that the forward was checked only for
    consistency between frameworks.

    :param on_note: called with each line the build has to say (``None``: quiet).
    :raises UsageError: a store that cannot be written, a build that fails, bad shapes.
    """
    from d5core.lv0.customop.runner import (
        NO_PYTHON_REFERENCE,
        python_reference_of,
        validate_custom,
    )
    from d5core.results.store import ResultsStore

    reference = python_reference_of(source, python_reference)

    with ResultsStore.open(db) as store:
        store.require_writable()  # found before the build and the checks, not after them
    outcome = validate_custom(
        source,
        frameworks,
        shapes=shapes,
        attributes=attributes,
        dtype=dtype,
        seed=seed,
        tolerances=tolerances,
        on_note=on_note,
        timeout_s=timeout_s,
        python_reference=reference,
    )
    if reference is None and on_note is not None:
        on_note(f"no Python reference (--reference FILE.py): {NO_PYTHON_REFERENCE}")
    extra = {"timeout_s": timeout_s,
             "forward_reference": str(reference) if reference else NO_PYTHON_REFERENCE}  # fmt: skip
    with ResultsStore.open(db) as store:
        run_ids = [store_validation(store, r, seed, tags, extra) for r in outcome.results]
    return StoredCustomValidation(outcome, run_ids)
