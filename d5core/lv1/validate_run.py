"""The level-1 runner of ``d5 validate net``: validate a network on an executor against
the reference and store the outcome as one run of kind ``validate``.

The command (:mod:`d5core.lv1.validate_net_cmd`) reads the options and shows what
:func:`validate_net_and_store` returns; the comparison itself is
:func:`d5core.lv1.runner.validate_network`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from d5core.lv1.runner import NetworkValidation

__all__ = ["StoredNetworkValidation", "validate_net_and_store"]


@dataclass(frozen=True)
class StoredNetworkValidation:
    """A network validation and the id of the run it is stored as."""

    result: NetworkValidation
    run_id: str


def validate_net_and_store(
    model: str,
    executor: str,
    *,
    batch: int,
    seed: int,
    tolerances: Any,
    db: Path | None,
    tags: Sequence[str] = (),
) -> StoredNetworkValidation:
    """Validate ``model`` on ``executor`` (every output, and every parameter's gradient
    when the executor trains) and store the outcome as a complete run of kind
    ``validate`` named ``MODEL EXECUTOR``.

    Metrics: ``passed`` and each check's finite figures, labelled by check and method.
    The config holds the model, executor and batch, and the nodes the executor ran on a
    fallback engine, if any.

    :raises UsageError: an unknown model or executor, a bad reference setting.
    """
    from d5core.lv1.runner import validate_network
    from d5core.results.store import ResultsStore

    result = validate_network(model, executor, batch=batch, seed=seed, tolerances=tolerances)
    config: dict[str, Any] = {"model": model, "executor": executor, "batch": batch}
    if result.fallback:  # nodes an executor ran on its fallback engine (forward only)
        config["fallback"] = result.fallback
    with (
        ResultsStore.open(db) as store,
        store.run("validate", f"{model} {executor}", config=config, seed=seed, tags=tags) as run_id,
    ):
        store.add_metric(run_id, "passed", float(result.passed))
        for check in [*result.outputs, *result.gradients]:
            for metric, value in (check.metrics or {}).items():
                if math.isfinite(value):
                    labels = {"check": check.label, "method": getattr(check, "method", "")}
                    store.add_metric(run_id, metric, value, labels=labels)
    return StoredNetworkValidation(result, str(run_id))
