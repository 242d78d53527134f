"""The level-1 runner of ``d5 validate net``: validate a network on an executor against
the reference and store the outcome as one run of kind ``validate``.

The command (:mod:`d5core.lv1.validate_net_cmd`) reads the options and shows what
:func:`validate_net_and_store` returns; the comparison itself is
:func:`d5core.lv1.runner.validate_network`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from d5core.errors import UsageError
from d5core.validate.isolated import DEFAULT_TIMEOUT_S

if TYPE_CHECKING:
    from d5core.lv1.runner import NetworkValidation

__all__ = [
    "NET_CHECK_TARGET",
    "StoredNetworkValidation",
    "validate_net_and_store",
    "validate_net_in_worker",
]

#: The check a validation worker runs for ``d5 validate net``.
NET_CHECK_TARGET = "d5core.lv1.validate_run:validate_net_in_worker"


def _failure_class() -> type:
    from d5core.lv1.runner import NetworkValidation

    @dataclass
    class _WorkerFailure(NetworkValidation):
        """A network validation whose worker died or timed out: failed, with the cause."""

        cause: str = ""

        @property
        def passed(self) -> bool:
            return False

        def failures(self) -> list[str]:
            return [self.cause]

    return _WorkerFailure


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
    db: str | Path | None,
    tags: Sequence[str] = (),
    timeout_s: float = DEFAULT_TIMEOUT_S,
    trace: str | None = None,
) -> StoredNetworkValidation:
    """Validate ``model`` on ``executor`` (every output, and every parameter's gradient
    when the executor trains) in a worker process killed after ``timeout_s`` seconds, and
    store the outcome as a run of kind ``validate`` named ``MODEL EXECUTOR``.

    Metrics: ``passed`` and each check's finite figures, labelled by check and method.
    The config holds the model, executor, batch and time limit, and the nodes the
    executor ran on a fallback engine, if any. A worker that dies or times out (the
    executor's native code crashed, or hung) is a failed validation, stored ``failed``
    with ``passed`` 0 and the cause (the signal, the phase, the executor) as its error.
    With ``trace`` (a level), the worker is traced and the trace kept with the run.

    :raises UsageError: an unknown model or executor, a bad reference setting, a store
        that cannot be written.
    """
    from d5core.lv0.customop.runner import _tolerances_json
    from d5core.results.store import ResultsStore
    from d5core.validate.isolated import run_isolated

    with ResultsStore.open(db) as store:
        store.require_writable()  # found before the model is loaded, not after the checks
    _check_request(model, executor)
    args = {"model": model, "executor": executor, "batch": batch, "seed": seed,
            "tolerances": _tolerances_json(tolerances)}  # fmt: skip
    if trace is not None:
        args["trace"] = trace
    outcome = run_isolated(NET_CHECK_TARGET, args, timeout_s=timeout_s)
    if outcome.usage:
        raise UsageError(outcome.failure)
    result = _network_validation(outcome.data, model, executor, batch, outcome.failure)
    config: dict[str, Any] = {"model": model, "executor": executor, "batch": batch,
                              "timeout_s": timeout_s}  # fmt: skip
    if trace is not None:
        config["trace"] = trace
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
        if outcome.failure:
            store.finish_run(run_id, "failed", error=f"{executor}: {outcome.failure}")
        elif trace is not None:
            from d5core.trace.capture import keep_document

            keep_document(store, run_id, outcome.data.get("trace"))
    return StoredNetworkValidation(result, str(run_id))


def _check_request(model: str, executor: str) -> None:
    """Refuse, in this process and before any worker starts, an unknown or unreadable
    model and an executor or reference that is not installed; plugins' warnings (a zoo
    name two plugins offer, say) are then shown here rather than lost in the worker."""
    from d5core.lv1.runner import load_model
    from d5core.plugins import get_plugin_manager
    from d5core.plugins.reference import reference_name

    load_model(model)
    manager = get_plugin_manager()
    for name in (executor, reference_name("d5.frameworks")):
        manager.load("d5.frameworks", name)


def _network_validation(
    data: Any, model: str, executor: str, batch: int, failure: str
) -> NetworkValidation:
    """The validation a worker sent as JSON, or a failed one naming why there is none."""
    from d5core.lv0.runner import validation_from_json

    if failure:
        cause = f"{executor}: {failure}"
        failed: NetworkValidation = _failure_class()(model, executor, batch, notes=[cause],
                                                      cause=cause)  # fmt: skip
        return failed
    # the checks are rebuilt as an operator report's are
    report = validation_from_json({"op": model, "op_type": model, "backend": executor, "dtype": "",
                                   "problem": "", "against": "", "outputs": data["outputs"],
                                   "gradients": data["gradients"]}).report  # fmt: skip
    from d5core.lv1.runner import NetworkValidation

    return NetworkValidation(model, executor, batch, str(data.get("against", "")),
                             report.outputs, report.gradients, list(data.get("notes", [])),
                             dict(data.get("fallback", {})))  # fmt: skip


def _phased_executor(executor: Any, name: str, phase: Callable[[str], None]) -> Any:
    """``executor``, reporting its inference and backprop calls to ``phase``."""

    class Phased:
        def __getattr__(self, attribute: str) -> Any:
            return getattr(executor, attribute)

        def inference(self, *args: Any, **kwargs: Any) -> Any:
            phase(f"{name} inference")
            return executor.inference(*args, **kwargs)

        def inference_and_backprop(self, *args: Any, **kwargs: Any) -> Any:
            phase(f"{name} backprop")
            return executor.inference_and_backprop(*args, **kwargs)

    return Phased()


def validate_net_in_worker(
    *,
    phase: Callable[[str], None],
    model: str,
    executor: str,
    batch: int,
    seed: int,
    tolerances: Any,
    trace: str | None = None,
) -> dict[str, Any]:
    """In a check worker (:mod:`d5core.validate.isolated`): validate ``model`` on
    ``executor`` and return the validation as JSON, reporting each executor's inference
    and backprop as a phase (``torch inference``, ``numpy backprop``...).

    This process exists for this one check, so the runner's executor factory is
    wrapped here to hear the phases.
    """
    from d5core.lv0.customop.runner import _tolerances_from_json
    from d5core.lv1 import runner

    original = runner.executor_by_name

    def phased(name: str, *args: Any, **kwargs: Any) -> Any:
        phase(f"loading {name}")
        return _phased_executor(original(name, *args, **kwargs), name, phase)

    from d5core.trace.capture import traced_worker

    def work(on_phase: Callable[[str], None]) -> dict[str, Any]:
        nonlocal phase
        phase = on_phase
        phase(f"loading {model}")
        runner.executor_by_name = phased
        result = runner.validate_network(model, executor, batch=batch, seed=seed,
                                         tolerances=_tolerances_from_json(tolerances))  # fmt: skip
        return result.to_json()

    return traced_worker(trace, executor, phase, work)
