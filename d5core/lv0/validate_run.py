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

if TYPE_CHECKING:
    from d5core.lv0.customop.runner import CustomValidation
    from d5core.lv0.runner import OperatorValidation

__all__ = [
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
    store: Any, result: OperatorValidation, seed: int, tags: Sequence[str] = ()
) -> str:
    """Record one operator validation in ``store`` as a complete run of kind
    ``validate``, tagged ``tags``; its id. Metrics: ``passed`` and each check's finite
    figures, labelled by check and method."""
    config = {"op": result.op, "backend": result.backend, "dtype": result.dtype,
              "problem": result.problem}  # fmt: skip
    name = f"{result.op} {result.backend}"
    with store.run("validate", name, config=config, seed=seed, tags=tags) as run_id:
        store.add_metric(run_id, "passed", float(result.passed))
        for check in [*result.report.outputs, *result.report.gradients]:
            for metric, value in (check.metrics or {}).items():
                if math.isfinite(value):
                    labels = {"check": check.label, "method": getattr(check, "method", "")}
                    store.add_metric(run_id, metric, value, labels=labels)
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
    db: Path | None,
    tags: Sequence[str] = (),
) -> StoredValidation:
    """Validate ``op`` of ``backend`` on its problem (the default one, reshaped to
    ``shapes`` when given) and store the outcome as one run.

    :raises UsageError: an operator without a default problem and no shapes, an unknown
        backend or operator.
    """
    from d5core.lv0.runner import problem_for, validate_op
    from d5core.results.store import ResultsStore

    problem = problem_for(op, shapes=shapes, attributes=attributes)
    result = validate_op(problem, backend, dtype=dtype, seed=seed, tolerances=tolerances)
    with ResultsStore.open(db) as store:
        run_id = store_validation(store, result, seed, tags)
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
    db: Path | None,
    tags: Sequence[str] = (),
    on_note: Callable[[str], None] | None = None,
) -> StoredCustomValidation:
    """Build the custom operator in ``source``, validate it in each of ``frameworks``
    (``None``: every installed one) and store each validation as a run.

    :param on_note: called with each line the build has to say (``None``: quiet).
    """
    from d5core.lv0.customop.runner import validate_custom
    from d5core.results.store import ResultsStore

    outcome = validate_custom(
        source,
        frameworks,
        shapes=shapes,
        attributes=attributes,
        dtype=dtype,
        seed=seed,
        tolerances=tolerances,
        on_note=on_note,
    )
    with ResultsStore.open(db) as store:
        run_ids = [store_validation(store, result, seed, tags) for result in outcome.results]
    return StoredCustomValidation(outcome, run_ids)
