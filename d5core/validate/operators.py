"""Compare an operator's outputs and gradients with those of a reference.

The pass criterion for one element is ``numpy.isclose``'s with one change: the absolute
tolerance is scaled by the size of the expected tensor,

    |actual - expected| <= atol * s + rtol * |expected|,   s = max(1, max |expected|),

so that a sum over many terms is not held to a tighter absolute bound than its magnitude
warrants. ``tol_ratio``, the largest ratio of the left side to the right side, is the
number that decides: a check passes when it is at most 1. Integer and boolean tensors
must match exactly.

A non-finite value (NaN, +inf, -inf) in the values checked fails the check, wherever it
is and whatever the expected value there: two NaNs at the same place agree, but their
agreement proves nothing about the computation. The failure names the first non-finite
value's index and how many there are. The one exception is a problem whose non-finite
results are expected (an input holding NaN or infinity, say): with ``allow_nonfinite``
the non-finite values must then equal the expected ones exactly, place by place, and the
check says that it allowed them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from d5core.errors import UsageError, one_line
from d5core.levels.operators import Operator

__all__ = [
    "DECLARED_NO_GRADIENT",
    "DEFAULT_TOLERANCES",
    "GradientCheck",
    "OutputCheck",
    "Tolerance",
    "Tolerances",
    "ValidationReport",
    "check_arrays",
    "check_tolerance",
    "compare_outputs",
    "default_grad_outputs",
    "error_metrics",
    "nonfinite_summary",
    "tolerance_for",
    "validate_operator",
]


@dataclass(frozen=True)
class Tolerance:
    """Relative and (scaled) absolute tolerance for one element type.

    :raises UsageError: for a tolerance that is negative, NaN or infinite: each would let
        any value pass (0 asks for exact equality).
    """

    rtol: float
    atol: float

    def __post_init__(self) -> None:
        for name in ("rtol", "atol"):
            check_tolerance(name, getattr(self, name))


def check_tolerance(name: str, value: Any) -> float:
    """``value`` as a float if it is a usable tolerance: finite and at least 0.

    :param name: what the value is, for the message (``rtol``, ``--atol``).
    :raises UsageError: naming the value and what to give instead.
    """
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not (math.isfinite(number) and number >= 0.0):  # NaN fails every comparison
        raise UsageError(
            f"{name} {value!r} is not a tolerance: give a finite number >= 0 "
            f"(0 asks for exact equality)"
        )
    return number


#: Default tolerances by dtype name. float32 allows for a different summation order in a
#: reduction of a few thousand terms; float64 for the same at double precision, far above
#: its rounding (about 1e-16) yet far below any real error. Half precisions are listed
#: for backends that offer them. Integers and booleans are compared exactly.
DEFAULT_TOLERANCES: Mapping[str, Tolerance] = MappingProxyType(
    {
        "float16": Tolerance(rtol=1e-2, atol=1e-3),
        "bfloat16": Tolerance(rtol=2e-2, atol=1e-2),
        "float32": Tolerance(rtol=1e-4, atol=1e-5),
        "float64": Tolerance(rtol=1e-7, atol=1e-9),
    }
)

_EXACT = Tolerance(rtol=0.0, atol=0.0)

#: A tolerance for every dtype, or overrides of some defaults by dtype name (each a
#: :class:`Tolerance` or a mapping with ``rtol`` and ``atol``, as read from a recipe).
Tolerances = Tolerance | Mapping[str, Tolerance | Mapping[str, float]]


def tolerance_for(dtype: Any, tolerances: Tolerances | None = None) -> Tolerance:
    """The tolerance that applies to arrays of ``dtype``.

    :param tolerances: one tolerance for all floating dtypes, or a mapping from dtype
        name to tolerance that overrides :data:`DEFAULT_TOLERANCES`.
    """
    dt = np.dtype(dtype)
    if not np.issubdtype(dt, np.inexact):
        return _EXACT
    if isinstance(tolerances, Tolerance):
        return tolerances
    name = dt.name
    default = DEFAULT_TOLERANCES.get(name, DEFAULT_TOLERANCES["float32"])
    if tolerances is None or name not in tolerances:
        return default
    given = tolerances[name]
    if isinstance(given, Tolerance):
        return given
    return Tolerance(
        rtol=check_tolerance(f"{name} rtol", given.get("rtol", default.rtol)),
        atol=check_tolerance(f"{name} atol", given.get("atol", default.atol)),
    )


def error_metrics(actual: np.ndarray, expected: np.ndarray) -> dict[str, float]:
    """Error of ``actual`` against ``expected`` (same shape), over positions where both are
    finite; ``nonfinite`` counts positions where the non-finite values disagree.

    When ``nonfinite`` is not 0 the error is not a number: every norm is then NaN (never
    the 0 that the finite positions alone might give), so that no table shows a NaN
    output as exact.

    ``l1``, ``l2`` and ``max_abs`` are norms (1, 2 and infinity) of the difference.
    ``rel_l1`` and ``rel_l2`` divide them by the same norm of ``expected`` (or by the
    smallest normal float when that is zero). ``max_rel`` is the largest element-wise
    relative error with a safe denominator: ``|a - e| / max(|e|, floor)`` with
    ``floor = sqrt(eps) * max(1, max |e|)`` for the dtype of ``expected`` (its machine
    epsilon ``eps``; float64's for integers), so that elements far smaller than the
    tensor's scale, whose digits a correct computation does not keep, cannot dominate.
    """
    a = np.asarray(actual)
    e = np.asarray(expected)
    if a.shape != e.shape:
        raise ValueError(f"shapes differ: actual {a.shape}, expected {e.shape}")
    a64 = a.astype(np.float64)
    e64 = e.astype(np.float64)
    finite = np.isfinite(a64) & np.isfinite(e64)
    same_nonfinite = (a64 == e64) | (np.isnan(a64) & np.isnan(e64))
    nonfinite = int(np.count_nonzero(~finite & ~same_nonfinite))
    d = np.abs(a64[finite] - e64[finite])
    ef = np.abs(e64[finite])
    tiny = float(np.finfo(np.float64).tiny)
    eps = float(np.finfo(e.dtype).eps) if np.issubdtype(e.dtype, np.inexact) else 2.0**-52
    scale = max(1.0, float(ef.max(initial=0.0)))
    floor = math.sqrt(eps) * scale
    l1 = float(d.sum())
    l2 = float(np.sqrt(np.square(d).sum()))
    norms = {
        "l1": l1,
        "l2": l2,
        "rel_l1": l1 / max(float(ef.sum()), tiny),
        "rel_l2": l2 / max(float(np.sqrt(np.square(ef).sum())), tiny),
        "max_abs": float(d.max(initial=0.0)),
        "max_rel": float((d / np.maximum(ef, floor)).max(initial=0.0)),
    }
    if nonfinite:
        norms = dict.fromkeys(norms, math.nan)
    return {**norms, "nonfinite": float(nonfinite)}


def nonfinite_summary(values: np.ndarray) -> tuple[int, tuple[int, ...] | None, str]:
    """How many values of ``values`` are NaN or infinite, the index of the first (in C
    order), and both in words (``"2 non-finite values (1 NaN, 1 +inf), the first at index
    (0, 3)"``); ``(0, None, "")`` for an array without any, or one that is not floating.
    """
    a = np.asarray(values)
    if not np.issubdtype(a.dtype, np.inexact):
        return 0, None, ""
    bad = ~np.isfinite(a)
    count = int(np.count_nonzero(bad))
    if not count:
        return 0, None, ""
    flat = int(np.argmax(bad.reshape(-1)))
    first = tuple(int(i) for i in np.unravel_index(flat, a.shape))
    nan = int(np.count_nonzero(np.isnan(a)))
    pos = int(np.count_nonzero(np.isposinf(a)))
    neg = count - nan - pos
    kinds = ", ".join(
        f"{n} {kind}" for n, kind in ((nan, "NaN"), (pos, "+inf"), (neg, "-inf")) if n
    )
    plural = "s" if count > 1 else ""
    return count, first, f"{count} non-finite value{plural} ({kinds}), the first at index {first}"


def _tolerance_ratio(
    a: np.ndarray, e: np.ndarray, tol: Tolerance
) -> tuple[float, tuple[int, ...] | None]:
    """Largest ``|a - e| / (atol * s + rtol * |e|)`` over finite positions, and where."""
    a64 = a.astype(np.float64)
    e64 = e.astype(np.float64)
    finite = np.isfinite(a64) & np.isfinite(e64)
    if not finite.any():
        return 0.0, None
    with np.errstate(invalid="ignore"):  # inf - inf where neither is finite: masked
        d = np.where(finite, np.abs(a64 - e64), 0.0)
    ae = np.where(finite, np.abs(e64), 0.0)
    bound = tol.atol * max(1.0, float(ae.max())) + tol.rtol * ae
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(d == 0.0, 0.0, d / bound)
    flat = int(np.argmax(ratio))
    worst = float(ratio.reshape(-1)[flat])
    if worst == 0.0:
        return 0.0, None
    return worst, tuple(int(i) for i in np.unravel_index(flat, ratio.shape))


def _fmt(value: float) -> str:
    return f"{value:.3g}"


@dataclass
class _Check:
    """What one comparison found: metric values and, if it failed, which metric and why."""

    #: Position of the output or input in the operator's list.
    index: int
    name: str
    passed: bool = True
    metrics: dict[str, float] = field(default_factory=dict)
    #: The metric that failed (``shape``, ``dtype``, ``nonfinite``, ``tol_ratio``, ...).
    failed_metric: str | None = None
    #: One line explaining the failure; empty when the check passed, except to say that
    #: it passed with non-finite values it was told to allow.
    detail: str = ""

    @property
    def label(self) -> str:
        """What was checked, for messages: ``output 0 (Y)``, ``gradient of input 1 (W)``."""
        raise NotImplementedError

    def to_json(self) -> dict[str, Any]:
        """The check as plain JSON types; non-finite metric values become ``None``."""
        data = asdict(self)
        data["label"] = self.label
        data["metrics"] = {k: (v if math.isfinite(v) else None) for k, v in self.metrics.items()}
        return data


@dataclass
class OutputCheck(_Check):
    """The comparison of one forward output with the reference's."""

    shape: tuple[int, ...] = ()
    dtype: str = ""

    @property
    def label(self) -> str:
        return f"output {self.index}" + (f" ({self.name})" if self.name else "")


@dataclass
class GradientCheck(_Check):
    """One check of the gradient with respect to one input.

    ``method`` is ``"reference"`` (the candidate's backward against the reference's),
    ``"full"`` (central differences for every element), ``"directional"`` (central
    differences along seeded random directions) or ``"backward"`` (whether the candidate
    has a backward at all, for one that implements none).
    """

    method: str = ""
    #: Why the check was not made (no gradient by design, an integer input), or ``""``.
    skipped: str = ""

    @property
    def label(self) -> str:
        return f"gradient of input {self.index}" + (f" ({self.name})" if self.name else "")


def _first_mismatch(a: np.ndarray, e: np.ndarray) -> tuple[int, ...] | None:
    """The index of the first position where a non-finite value of either array is not
    matched by the same value in the other."""
    a64 = a.astype(np.float64)
    e64 = e.astype(np.float64)
    same = (a64 == e64) | (np.isnan(a64) & np.isnan(e64))
    bad = ~(np.isfinite(a64) & np.isfinite(e64)) & ~same
    if not bad.any():
        return None
    flat = int(np.argmax(bad.reshape(-1)))
    return tuple(int(i) for i in np.unravel_index(flat, bad.shape))


def check_arrays(
    actual: np.ndarray,
    expected: np.ndarray,
    tolerance: Tolerance,
    *,
    allow_nonfinite: bool = False,
) -> tuple[dict[str, float], str | None, str]:
    """Compare two arrays; return the metrics, the failed metric (or ``None``) and why.

    A NaN or infinity in ``actual`` fails on ``nonfinite``, even where ``expected`` holds
    the same value, and the metrics' norms are then NaN. With ``allow_nonfinite`` the
    non-finite values of both must only coincide exactly; the check then passes with a
    ``why`` that says what it allowed.
    """
    a = np.asarray(actual)
    e = np.asarray(expected)
    if a.shape != e.shape:
        return {}, "shape", f"shape {a.shape} where {e.shape} was expected"
    metrics = error_metrics(a, e)
    ratio, where = _tolerance_ratio(a, e, tolerance)
    metrics["tol_ratio"] = ratio
    summary = f"max_abs={_fmt(metrics['max_abs'])}, rel_l2={_fmt(metrics['rel_l2'])}"
    count, first, described = nonfinite_summary(a)
    if count and not allow_nonfinite:
        for name in ("l1", "l2", "rel_l1", "rel_l2", "max_abs", "max_rel", "tol_ratio"):
            metrics[name] = math.nan
        assert first is not None
        shared = ""
        if np.issubdtype(e.dtype, np.inexact) and not np.isfinite(e[first]):
            shared = (
                f" (the expected value there, {e[first]}, is not finite either: agreement "
                "between non-finite values proves nothing)"
            )
        return metrics, "nonfinite", described + shared
    if metrics["nonfinite"]:
        bad = _first_mismatch(a, e)
        shown = f": {a[bad]} where {e[bad]} was expected at index {bad}" if bad is not None else ""
        why = f"{int(metrics['nonfinite'])} non-finite value(s) differ from the expected{shown}"
        return metrics, "nonfinite", why
    if not ratio <= 1.0:  # NaN, from a tolerance built without checks, fails too
        at = f" at index {where}" if where is not None else ""
        why = (
            f"tol_ratio {_fmt(ratio)} > 1{at} (rtol={tolerance.rtol:g}, "
            f"atol={tolerance.atol:g}; {summary})"
        )
        return metrics, "tol_ratio", why
    if count:
        return metrics, None, f"{described}, allowed as expected, and equal to the expected ones"
    return metrics, None, ""


def compare_outputs(
    actual_list: Sequence[np.ndarray],
    expected_list: Sequence[np.ndarray],
    *,
    tolerances: Tolerances | None = None,
    names: Sequence[str] | None = None,
    allow_nonfinite: bool = False,
) -> list[OutputCheck]:
    """Compare each actual output with the expected one at the same position.

    The tolerance follows the expected output's dtype (:func:`tolerance_for`); an actual
    output of another dtype fails on ``dtype``, a missing one on ``missing``, one holding
    NaN or infinity on ``nonfinite`` unless ``allow_nonfinite`` (see :func:`check_arrays`).
    """
    checks: list[OutputCheck] = []
    for i, expected in enumerate(expected_list):
        e = np.asarray(expected)
        check = OutputCheck(
            index=i,
            name=names[i] if names is not None and i < len(names) else "",
            shape=tuple(int(d) for d in e.shape),
            dtype=str(e.dtype),
        )
        checks.append(check)
        if i >= len(actual_list):
            check.passed, check.failed_metric = False, "missing"
            check.detail = "not produced"
            continue
        a = np.asarray(actual_list[i])
        if a.dtype != e.dtype:
            check.passed, check.failed_metric = False, "dtype"
            check.detail = f"dtype {a.dtype} where {e.dtype} was expected"
            continue
        metrics, failed, why = check_arrays(
            a, e, tolerance_for(e.dtype, tolerances), allow_nonfinite=allow_nonfinite
        )
        check.metrics, check.failed_metric, check.detail = metrics, failed, why
        check.passed = failed is None
    return checks


@dataclass
class ValidationReport:
    """The outcome of validating one operator: its outputs, then its gradients."""

    op_type: str
    outputs: list[OutputCheck] = field(default_factory=list)
    gradients: list[GradientCheck] = field(default_factory=list)
    #: Problems that stopped a comparison, such as the candidate raising an exception.
    errors: list[str] = field(default_factory=list)
    #: The candidate declares that it has no gradient by design
    #: (:attr:`~d5core.levels.operators.Operator.no_gradient`): its gradients were not
    #: checked, and that is not a failure.
    no_gradient: bool = False
    #: Non-finite outputs and gradients were declared expected for this problem
    #: (``allow_nonfinite``): they passed where they equal the reference's, and the
    #: checks that held any say so.
    nonfinite_allowed: bool = False

    @property
    def passed(self) -> bool:
        """Whether every check passed and nothing went wrong."""
        checks: list[_Check] = [*self.outputs, *self.gradients]
        return not self.errors and all(c.passed for c in checks)

    def failures(self) -> list[str]:
        """One line per failure, naming the output or input and the metric."""
        lines = list(self.errors)
        for out in self.outputs:
            if not out.passed:
                lines.append(f"{out.label}: {out.failed_metric}: {out.detail}")
        for grad in self.gradients:
            if not grad.passed:
                lines.append(f"{grad.label} [{grad.method}]: {grad.failed_metric}: {grad.detail}")
        return lines

    def to_json(self) -> dict[str, Any]:
        """The report as plain JSON types, the form the results store keeps."""
        return {
            "op_type": self.op_type,
            "passed": self.passed,
            "outputs": [c.to_json() for c in self.outputs],
            "gradients": [c.to_json() for c in self.gradients],
            "errors": list(self.errors),
            "failures": self.failures(),
            "no_gradient": self.no_gradient,
            "nonfinite_allowed": self.nonfinite_allowed,
        }


def default_grad_outputs(
    outputs: Sequence[np.ndarray], seed: int, dtype: Any = None
) -> list[np.ndarray]:
    """Seeded standard-normal cotangents for floating outputs, zeros for the others.

    :param dtype: the dtype of the cotangents; each output's own (float64 for a
        non-floating output) when ``None``.
    """
    rng = np.random.default_rng(seed)
    grads: list[np.ndarray] = []
    for out in outputs:
        o = np.asarray(out)
        floating = np.issubdtype(o.dtype, np.floating)
        dt = np.dtype(dtype) if dtype is not None else (o.dtype if floating else np.float64)
        if floating:
            grads.append(rng.standard_normal(o.shape).astype(dt))
        else:
            grads.append(np.zeros(o.shape, dtype=dt))
    return grads


def _name(names: Sequence[str] | None, i: int) -> str:
    return names[i] if names is not None and i < len(names) else ""


#: Why the gradient of an input the operator declares without gradient is not checked.
DECLARED_NO_GRADIENT = "the operator declares no gradient for this input"


def _without_backward(
    candidate: Operator,
    inputs: Sequence[np.ndarray],
    names: Sequence[str] | None,
    wrt: Sequence[int] | None,
) -> list[GradientCheck]:
    """The gradient checks of a candidate that implements no backward: skipped for inputs
    without a gradient (declared so, or not floating), failed as ``missing`` for others."""
    checks: list[GradientCheck] = []
    for i, x in enumerate(inputs):
        if wrt is not None and i not in wrt:
            continue
        check = GradientCheck(index=i, name=_name(names, i), method="backward")
        checks.append(check)
        if candidate.declares_no_gradient(i):
            check.skipped = DECLARED_NO_GRADIENT
        elif not np.issubdtype(x.dtype, np.floating):
            check.skipped = f"{x.dtype} input: not differentiable"
        else:
            check.passed, check.failed_metric = False, "missing"
            check.detail = (
                "the candidate has no backward; implement backward(), or set "
                "no_gradient = True on the operator if it has no gradient by design"
            )
    return checks


def _compare_gradients(
    candidate: Sequence[np.ndarray | None],
    reference: Sequence[np.ndarray | None],
    inputs: Sequence[np.ndarray],
    tolerances: Tolerances | None,
    names: Sequence[str] | None,
    wrt: Sequence[int] | None,
    allow_nonfinite: bool = False,
) -> list[GradientCheck]:
    checks: list[GradientCheck] = []
    for i, x in enumerate(inputs):
        if wrt is not None and i not in wrt:
            continue
        check = GradientCheck(index=i, name=_name(names, i), method="reference")
        checks.append(check)
        ref = reference[i] if i < len(reference) else None
        got = candidate[i] if i < len(candidate) else None
        if ref is None:
            check.skipped = "the reference gives no gradient for this input"
            continue
        if got is None:
            check.passed, check.failed_metric = False, "missing"
            check.detail = "the candidate gives no gradient where the reference gives one"
            continue
        e = np.asarray(ref)
        metrics, failed, why = check_arrays(
            np.asarray(got),
            e,
            tolerance_for(np.asarray(x).dtype, tolerances),
            allow_nonfinite=allow_nonfinite,
        )
        check.metrics, check.failed_metric, check.detail = metrics, failed, why
        check.passed = failed is None
    return checks


def _finite_outputs(
    actual: Sequence[np.ndarray], names: Sequence[str] | None, allow_nonfinite: bool
) -> list[OutputCheck]:
    """Checks of the outputs that hold NaN or infinity, for a candidate with nothing to
    compare its outputs with: failed, or passed with a note when ``allow_nonfinite``."""
    checks: list[OutputCheck] = []
    for i, out in enumerate(actual):
        a = np.asarray(out)
        count, _, described = nonfinite_summary(a)
        if not count:
            continue
        check = OutputCheck(
            index=i, name=_name(names, i), shape=tuple(int(d) for d in a.shape), dtype=str(a.dtype)
        )
        if allow_nonfinite:
            check.detail = f"{described}, allowed as expected (nothing to compare them with)"
        else:
            check.passed, check.failed_metric, check.detail = False, "nonfinite", described
        checks.append(check)
    return checks


def validate_operator(
    candidate: Operator,
    reference: Operator | None,
    inputs: Sequence[np.ndarray],
    *,
    grad_outputs: Sequence[np.ndarray] | None = None,
    tolerances: Tolerances | None = None,
    gradcheck: bool = True,
    seed: int = 0,
    outputs: Sequence[int] | None = None,
    wrt: Sequence[int] | None = None,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    float64_candidate: Operator | None = None,
    allow_nonfinite: bool = False,
) -> ValidationReport:
    """Validate ``candidate`` against ``reference`` on ``inputs``.

    Three comparisons, each recorded in the report: the candidate's forward outputs with
    the reference's; the candidate's backward with the reference's, for the same
    cotangents (when both are differentiable); and, when ``gradcheck`` is true, the
    candidate's backward with central differences of its own forward in float64
    (:func:`d5core.validate.gradcheck.gradcheck`). With ``reference=None`` (an operator
    nothing else implements, or the candidate itself) only the gradient check is made, and
    the outputs are checked for NaN and infinity alone (an output holding one fails).

    A NaN or infinity in the candidate's outputs or gradients fails its check, even where
    the reference gives the same (see :func:`check_arrays`).

    :param grad_outputs: cotangents of the outputs; by default seeded standard-normal
        values for floating outputs and zeros for the others.
    :param tolerances: see :func:`tolerance_for`; they apply to the first two comparisons.
    :param outputs: indices of the outputs to compare (all of the reference's by
        default); use it to leave out an optional output the candidate does not produce.
    :param wrt: indices of the inputs whose gradients are checked (all by default).
    :param float64_candidate: the candidate built for float64, for the gradient check of a
        backend that fixes its dtype when an operator is created; by default the candidate
        itself is run on float64 copies of the inputs.
    :param allow_nonfinite: the problem declares non-finite results expected (its inputs
        hold NaN or infinity, say): non-finite values then pass where they equal the
        reference's exactly, and the report records that they were allowed.
    """
    op_type = candidate.op_type or (reference.op_type if reference is not None else "")
    report = ValidationReport(
        op_type=op_type or type(candidate).__name__, nonfinite_allowed=allow_nonfinite
    )
    if reference is candidate:  # a comparison with itself would prove nothing
        reference = None
    arrays = [np.asarray(x) for x in inputs]
    try:
        actual = candidate.forward(arrays)
    except Exception as exc:
        report.errors.append(f"the candidate's forward raised {one_line(exc)}")
        return report
    expected: list[np.ndarray] | None = None
    if reference is not None:
        expected = reference.forward(arrays)
        keep = range(len(expected)) if outputs is None else list(outputs)
        checks = compare_outputs(
            actual,
            expected,
            tolerances=tolerances,
            names=output_names,
            allow_nonfinite=allow_nonfinite,
        )
        report.outputs = [c for c in checks if c.index in keep]
    else:
        report.outputs = _finite_outputs(actual, output_names, allow_nonfinite)
    if not candidate.differentiable:
        report.no_gradient = candidate.no_gradient
        report.gradients = _without_backward(candidate, arrays, input_names, wrt)
        return report

    grads = (
        [np.asarray(g) for g in grad_outputs]
        if grad_outputs is not None
        else default_grad_outputs(expected if expected is not None else actual, seed)
    )
    try:
        cand_grads = candidate.backward(grads, arrays, actual)
    except Exception as exc:
        report.errors.append(f"the candidate's backward raised {one_line(exc)}")
        return report
    if reference is not None and expected is not None and reference.differentiable:
        ref_grads = reference.backward(grads, arrays, expected)
        report.gradients = _compare_gradients(
            cand_grads, ref_grads, arrays, tolerances, input_names, wrt, allow_nonfinite
        )
    if gradcheck:
        from d5core.validate.gradcheck import gradcheck as run_gradcheck

        try:
            report.gradients += run_gradcheck(
                float64_candidate or candidate,
                arrays,
                grad_outputs=grads,
                seed=seed,
                names=input_names,
                wrt=wrt,
                allow_nonfinite=allow_nonfinite,
            )
        except Exception as exc:
            report.errors.append(f"the gradient check raised {one_line(exc)}")
    return report
