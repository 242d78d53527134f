"""Level 0: validate operators against the reference and benchmark them across backends.

Backends are loaded by name from the ``d5.operators`` group; operators contributed through
the ``d5_custom_operators`` hook form one more backend named ``custom``. Inputs are made
once per problem from a seed and converted by each backend outside the timed region.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from d5core.errors import UsageError
from d5core.levels.operators import Operator, OperatorBackend, TensorDescriptor
from d5core.lv0.workloads.problems import Problem
from d5core.plugins import PluginManager, get_plugin_manager

if TYPE_CHECKING:
    pass

__all__ = [
    "CUSTOM_BACKEND",
    "CustomBackend",
    "OperatorTiming",
    "OperatorValidation",
    "Timed",
    "backend_by_name",
    "build_operator",
    "check_bench_request",
    "check_operator",
    "flops_of",
    "preparation",
    "prepare",
    "problem_for",
    "timing_of",
    "validate_op",
    "validate_op_in_worker",
    "validation_from_json",
]

#: The name under which operators from the ``d5_custom_operators`` hook are selected.
CUSTOM_BACKEND = "custom"

#: A prepared, zero-argument callable: the only code inside a timed region.
Timed = Callable[[], object]


class CustomBackend(OperatorBackend):
    """Operators written in Python and contributed by plugins through a hook."""

    name = CUSTOM_BACKEND

    def __init__(self, operators: Mapping[str, type[Operator]]) -> None:
        self._operators = dict(operators)

    def supported(self) -> Collection[str]:
        return sorted(self._operators)

    def create(
        self, op_type: str, attributes: Mapping[str, Any], inputs: Sequence[TensorDescriptor]
    ) -> Operator:
        return self._operators[op_type](attributes)


def backend_by_name(name: str, manager: PluginManager | None = None) -> OperatorBackend:
    """Instantiate the operator backend ``name``.

    :raises UsageError: naming the installed backends when ``name`` is unknown.
    """
    manager = manager or get_plugin_manager()
    if name == CUSTOM_BACKEND:
        operators = manager.merged("d5_custom_operators")  # clashes are warned about there
        if not operators:
            raise UsageError(
                "no plugin contributes custom operators (the d5_custom_operators hook); "
                "see docs/operators.md for writing one"
            )
        return CustomBackend(operators)
    factory = manager.load("d5.operators", name)
    backend = factory() if isinstance(factory, type) else factory
    if not isinstance(backend, OperatorBackend):
        raise UsageError(f"operator backend {name!r} is not an OperatorBackend; fix its plugin")
    return backend


def build_operator(
    backend: OperatorBackend, problem: Problem, dtype: str, inputs: Sequence[np.ndarray]
) -> Operator:
    """Create ``problem``'s operator on ``backend`` for ``inputs`` of ``dtype``.

    :raises UsageError: for an operator the backend lacks or a dtype it does not support.
    """
    check_operator(backend, problem, dtype)
    descriptors = [TensorDescriptor.of(a) for a in inputs]
    return backend.create(problem.op, problem.attributes, descriptors)


def check_operator(backend: OperatorBackend, problem: Problem, dtype: str) -> None:
    """Refuse a problem whose operator ``backend`` lacks, or a dtype it does not support.

    :raises UsageError: naming what the backend has.
    """
    supported = backend.supported()
    if problem.op not in supported:
        raise UsageError(
            f"backend {backend.name!r} has no operator {problem.op!r}; "
            f"it has: {', '.join(sorted(supported))}"
        )
    if dtype not in backend.dtypes:
        raise UsageError(
            f"backend {backend.name!r} does not support dtype {dtype!r}; "
            f"choose one of: {', '.join(backend.dtypes)}"
        )


def flops_of(problem: Problem, direction: str) -> int:
    """FLOPs of one pass: the forward count, doubled for a backward (two products)."""
    return problem.flops * (2 if direction == "backward" else 1)


# -- validation ------------------------------------------------------------------------


def problem_for(
    op: str,
    *,
    shapes: Sequence[tuple[int, ...]] | None = None,
    attributes: Mapping[str, Any] | None = None,
) -> Problem:
    """The problem ``d5 validate op`` runs: the operator's default, reshaped if asked.

    :raises UsageError: when ``op`` has no default problem and no ``shapes`` were given.
    """
    from d5core.lv0.workloads.problems import DEFAULT_PROBLEMS, InputSpec

    if op in DEFAULT_PROBLEMS:
        problem = DEFAULT_PROBLEMS[op]
        if shapes:
            problem = problem.with_shapes(shapes)
    elif shapes:
        problem = Problem(op, tuple(InputSpec(s) for s in shapes))
    else:
        raise UsageError(
            f"d5 has no default problem for operator {op!r}; give its input shapes "
            f"with --shape (for example --shape 4x3,3x5)"
        )
    if attributes:
        problem = Problem(problem.op, problem.inputs, {**problem.attributes, **attributes})
    return problem


@dataclass
class OperatorValidation:
    """The outcome of validating one operator of one backend on one problem.

    ``op`` is the operator as selected (a custom operator's registered name); the
    report's ``op_type`` is what the operator declares it implements.
    """

    op: str
    backend: str
    dtype: str
    problem: str
    against: str
    report: Any
    #: The reference backend's operator the candidate was compared with: ``op``, or the
    #: ``op_type`` a custom operator registered under another name declares; ``None``
    #: when the reference has neither (central differences only).
    reference_op: str | None = None
    #: One line on what was compared when it is not the reference's ``op``: which
    #: operator stood in, or why there was none. Empty otherwise.
    note: str = ""
    #: One line on how the worker that ran the check died or timed out (the signal, the
    #: phase, the framework); empty when the check ran to its end.
    worker_failure: str = ""

    @property
    def passed(self) -> bool:
        return bool(self.report.passed)

    def to_json(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "backend": self.backend,
            "dtype": self.dtype,
            "problem": self.problem,
            "against": self.against,
            "reference_op": self.reference_op,
            "note": self.note,
            "worker_failure": self.worker_failure,
            "passed": self.passed,
            **{k: v for k, v in self.report.to_json().items() if k != "passed"},
        }


def validate_op(
    problem: Problem,
    backend_name: str,
    *,
    dtype: str = "float64",
    seed: int = 0,
    tolerances: Any = None,
    manager: PluginManager | None = None,
    reference: str | None = None,
    on_phase: Callable[[str], None] | None = None,
) -> OperatorValidation:
    """Validate ``backend_name``'s ``problem.op`` against the reference backend.

    The forward outputs and the backward are compared with the reference's, and the
    backward is checked by central differences in float64. The reference's operator is
    the one named ``problem.op``; a custom operator registered under another name is
    compared with the reference's operator of the ``op_type`` it declares. An operator
    the reference lacks under both names (a new custom operator) is checked by central
    differences alone. The result's ``note`` says which of these happened, when it is
    not the first.

    :param reference: the reference backend; ``None`` takes the setting
        (:func:`~d5core.plugins.reference.reference_name`: ``D5_REFERENCE``, else numpy).
    :param on_phase: hears each phase as it begins (``torch forward``, ``the numpy
        reference's backward``, ``torch gradient check``...), for a check worker to report.
    :raises UsageError: one line, for a reference that is not an installed backend.
    """
    from d5core.plugins.reference import reference_name
    from d5core.validate.announce import operator_validated
    from d5core.validate.operators import validate_operator

    reference_backend_name = reference_name("d5.operators", reference, manager=manager)
    phase = on_phase or (lambda name: None)

    phase(f"creating {backend_name}'s {problem.op}")
    candidate_backend = backend_by_name(backend_name, manager)
    inputs = problem.make_inputs(dtype, seed)
    candidate = build_operator(candidate_backend, problem, dtype, inputs)
    float64 = (
        build_operator(candidate_backend, problem, "float64", problem.make_inputs("float64", seed))
        if dtype != "float64" and "float64" in candidate_backend.dtypes
        else None
    )
    reference_backend = backend_by_name(reference_backend_name, manager)
    names = [spec.name for spec in problem.inputs]
    compared_with, note = _reference_op(problem.op, candidate.op_type, reference_backend_name,
                                        reference_backend.supported())  # fmt: skip
    if compared_with is not None:
        stand_in = replace(problem, op=compared_with)
        reference_op = build_operator(reference_backend, stand_in, dtype, inputs)
        against = reference_backend_name
    else:
        reference_op, against = candidate, "central differences only"
    if on_phase is not None:
        if reference_op is not candidate:
            reference_op = _phased(reference_op, f"the {against} reference's", on_phase)
        candidate = _phased(candidate, backend_name, on_phase)
        float64 = None if float64 is None else _phased(float64, backend_name, on_phase)
    report = validate_operator(
        candidate,
        reference_op,
        inputs,
        tolerances=tolerances,
        gradcheck=candidate.differentiable,
        seed=seed,
        input_names=names,
        float64_candidate=float64,
    )
    if against != reference_backend_name:
        # nothing to compare the outputs with: keep only their checks for NaN and infinity
        report.outputs = [c for c in report.outputs if c.failed_metric == "nonfinite"]
        report.gradients = [g for g in report.gradients if g.method != "reference"]
    validation = OperatorValidation(problem.op, backend_name, dtype, problem.label, against,
                                    report, compared_with, note)  # fmt: skip
    operator_validated(problem.op, backend_name, validation.to_json(), manager)
    return validation


class _Phased:
    """An operator that reports each call of its forward and backward to ``on_phase``
    (``NAME forward``, ``NAME backward``, then ``NAME gradient check``), and is
    otherwise the operator it wraps."""

    def __init__(self, inner: Any, name: str, on_phase: Callable[[str], None]) -> None:
        self._inner, self._name, self._on_phase = inner, name, on_phase
        self._after_backward = False

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._inner, attribute)

    def _enter(self, kind: str) -> None:
        step = "gradient check" if self._after_backward else kind
        self._after_backward = self._after_backward or kind == "backward"
        self._on_phase(f"{self._name} {step}")

    def forward(self, inputs: Sequence[np.ndarray]) -> Any:
        self._enter("forward")
        return self._inner.forward(inputs)

    def backward(self, *args: Any) -> Any:
        self._enter("backward")
        return self._inner.backward(*args)


def _phased(operator: Operator, name: str, on_phase: Callable[[str], None]) -> Any:
    """``operator`` reporting its calls to ``on_phase`` (see :class:`_Phased`)."""
    return _Phased(operator, name, on_phase)


def validate_op_in_worker(
    *,
    phase: Callable[[str], None],
    problem: Mapping[str, Any],
    backend: str,
    dtype: str,
    seed: int,
    tolerances: Any,
    trace: str | None = None,
) -> dict[str, Any]:
    """In a check worker (:mod:`d5core.validate.isolated`): :func:`validate_op` of
    ``backend`` on ``problem`` (as :func:`d5core.lv0.jobs.problem_to_json` wrote it), as
    JSON for :func:`validation_from_json`; traced at level ``trace`` when given (the
    document under ``"trace"``)."""
    from d5core.lv0.customop.runner import _tolerances_from_json
    from d5core.lv0.jobs import problem_from_json
    from d5core.trace.capture import traced_worker

    made = problem_from_json(problem)

    def work(on_phase: Callable[[str], None]) -> dict[str, Any]:
        return validate_op(made, backend, dtype=dtype, seed=seed, on_phase=on_phase,
                           tolerances=_tolerances_from_json(tolerances)).to_json()  # fmt: skip

    return traced_worker(trace, backend, phase, work)


def validation_from_json(data: Mapping[str, Any]) -> OperatorValidation:
    """The :class:`OperatorValidation` that :meth:`OperatorValidation.to_json` gave (in a
    check worker), with its report rebuilt."""
    from dataclasses import fields

    from d5core.validate.operators import GradientCheck, OutputCheck, ValidationReport

    def check(cls: Any, item: Mapping[str, Any]) -> Any:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in item.items() if k in known}
        values["metrics"] = {
            k: float("nan") if v is None else float(v) for k, v in item["metrics"].items()
        }
        if "shape" in values:
            values["shape"] = tuple(values["shape"])
        return cls(**values)

    plain = {f.name for f in fields(ValidationReport)} - {"outputs", "gradients"}
    report = ValidationReport(
        **{k: v for k, v in data.items() if k in plain},
        outputs=[check(OutputCheck, c) for c in data.get("outputs", [])],
        gradients=[check(GradientCheck, c) for c in data.get("gradients", [])],
    )
    return OperatorValidation(
        str(data["op"]), str(data["backend"]), str(data["dtype"]), str(data["problem"]),
        str(data["against"]), report, data.get("reference_op"), str(data.get("note", "")),
        str(data.get("worker_failure", "")),
    )  # fmt: skip


def _reference_op(
    op: str, op_type: str, reference: str, supported: Collection[str]
) -> tuple[str | None, str]:
    """The reference's operator to compare ``op`` with, and a note when it is not ``op``.

    ``op_type`` is what the candidate declares it implements; it stands in for ``op`` (a
    custom operator's registered name) when the reference has no ``op``.
    """
    if op in supported:
        return op, ""
    declared = op_type and op_type != op
    if declared and op_type in supported:
        return op_type, (
            f"{reference} has no operator {op!r}; {op} declares op_type {op_type!r}, so it "
            f"was compared with {reference}'s {op_type}"
        )
    also = f" nor {op_type!r}, the op_type {op} declares" if declared else ""
    return None, (
        f"{reference} has no operator {op!r}{also}: nothing to compare the outputs with, so "
        "only the backward was checked, by central differences"
    )


# -- benchmarking ----------------------------------------------------------------------


def check_bench_request(problems: Sequence[Problem], backends: Sequence[str], dtype: str) -> None:
    """Refuse, before anything runs, an unknown dtype, a backend listed twice, or a
    problem whose tensors would not fit in the free memory.

    :raises UsageError: naming what is wrong and how to fix it.
    """
    from d5core.lv0.workloads.problems import dtype_of

    dtype_of(dtype)
    seen: set[str] = set()
    for name in backends:
        if name in seen:
            raise UsageError(f"backend {name!r} is listed twice; list each backend once")
        seen.add(name)
    for problem in problems:
        problem.check_memory(dtype)


@dataclass
class OperatorTiming:
    """One measured (problem, backend, direction)."""

    problem: Problem
    backend: str
    direction: str
    dtype: str
    measurement: Any
    #: Achieved GFLOP/s at the median, when the problem's FLOPs are known.
    gflops: float | None
    #: ``gflops`` over ``peak_gflops``, when both are known.
    peak_fraction: float | None
    #: The peak the fraction is of: that of the cores the backend ran on (``None``: no
    #: fraction).
    peak_gflops: float | None = None
    #: The cores that peak counts (``None``: not known).
    peak_cores: int | None = None

    @property
    def flops(self) -> int:
        """FLOPs of one pass in this direction; 0 when not counted."""
        return flops_of(self.problem, self.direction)

    def gflops_samples(self) -> list[float]:
        """The achieved GFLOP/s of every sample; empty when the FLOPs are not counted."""
        flops = self.flops
        if not flops:
            return []
        return [flops / t / 1e9 for t in self.measurement.samples if t > 0]

    def to_json(self) -> dict[str, Any]:
        s = self.measurement.summary
        return {
            "op": self.problem.op,
            "problem": self.problem.label,
            "backend": self.backend,
            "direction": self.direction,
            "dtype": self.dtype,
            "median": s.median,
            "ci_low": s.ci_low,
            "ci_high": s.ci_high,
            "n": s.n,
            "stability": s.stability,
            "blocked": self.measurement.blocked,
            "block_size": self.measurement.block_size,
            "stopped_by": self.measurement.stopped_by,
            "gflops": self.gflops,
            "peak_fraction": self.peak_fraction,
            "threads_peak_gflops": self.peak_gflops if self.peak_fraction else None,
            "peak_cores": self.peak_cores if self.peak_fraction else None,
            # start-up costs, never in the samples (docs/measurement.md)
            "prepare_s": self.measurement.prepare_s,
            "first_call_s": self.measurement.first_call_s,
            "compile_s": self.measurement.compile_s,
        }


def timing_of(
    problem: Problem,
    backend: str,
    direction: str,
    dtype: str,
    measurement: Any,
    *,
    device: str = "cpu",
    peak_gflops: float | None = None,
    peak_cores: int | None = None,
) -> OperatorTiming:
    """The :class:`OperatorTiming` of ``measurement``: GFLOP/s at its median where the
    FLOPs are counted, and the fraction of ``peak_gflops`` (the peak of the
    ``peak_cores`` cores the backend ran on) for an operator on the CPU."""
    flops = flops_of(problem, direction)
    median = measurement.summary.median
    gflops = flops / median / 1e9 if flops and median else None
    on_cpu = device == "cpu"
    fraction = gflops / peak_gflops if gflops and peak_gflops and on_cpu else None
    return OperatorTiming(
        problem, backend, direction, dtype, measurement, gflops, fraction, peak_gflops, peak_cores
    )


def prepare(operator: Operator, direction: str, inputs: Sequence[np.ndarray], seed: int) -> Timed:
    """The callable to time for ``direction``; conversions happen here, untimed."""
    return preparation(operator, direction, inputs, seed)()


def preparation(
    operator: Operator, direction: str, inputs: Sequence[np.ndarray], seed: int
) -> Callable[[], Timed]:
    """What :func:`prepare` calls: the operator's ``prepare_forward`` or
    ``prepare_backward`` alone (the output gradients are made beforehand), so that the
    time it takes is the preparation's own (``prepare_s``)."""
    if direction == "forward":
        return lambda: operator.prepare_forward(inputs)
    if not operator.differentiable:
        raise UsageError(f"operator {operator.op_type or type(operator).__name__} has no backward")
    from d5core.validate.operators import default_grad_outputs

    grads = default_grad_outputs(operator.forward(list(inputs)), seed)
    return lambda: operator.prepare_backward(grads, inputs)
