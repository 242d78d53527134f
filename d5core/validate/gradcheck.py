"""Check an operator's backward against central differences of its forward, in float64.

For cotangents ``g`` of the outputs, backward must return the gradient of the scalar
``L(x) = sum_k <g_k, y_k(x)>`` with respect to each input. The check estimates that
gradient from the forward alone:

* an input with at most ``full_jacobian_max`` elements is perturbed one element at a
  time, ``(L(x + h e_j) - L(x - h e_j)) / 2h``: the whole Jacobian, column by column,
  contracted with ``g``, compared with backward element by element;
* a larger input is perturbed along ``directions`` seeded random unit directions ``v``,
  ``(L(x + h v) - L(x - h v)) / 2h``, compared with ``<backward, v>``.

Floating inputs are cast to float64 and the operator is run on them, so it must compute
in the dtype of its inputs; an operator built for one dtype (a framework backend's, say)
should be created for float64 for the check. Outputs that are not float64 fail the check
on ``dtype`` rather than give a meaningless result.

Central differences assume the forward is smooth near the inputs: choose test data away
from kinks and ties (ReLU at 0, equal values in a max-pooling window, a Dropout ratio at
which an element's keep decision flips), where backward's choice of one-sided gradient
is as right as any other and the estimate straddles both sides.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from d5core.levels.operators import Operator
from d5core.validate.operators import (
    DECLARED_NO_GRADIENT,
    GradientCheck,
    Tolerance,
    check_arrays,
    default_grad_outputs,
)

__all__ = ["GRADCHECK_TOLERANCE", "gradcheck"]

#: Tolerance of the comparison with central differences in float64: the estimate's
#: truncation error is about h^2 (1e-12) and its rounding error about 1e-16 |L| / h
#: (1e-10 |L|), both far below these bounds, while a backward that is off by 1% fails.
GRADCHECK_TOLERANCE = Tolerance(rtol=1e-5, atol=1e-6)

_Loss = Callable[[list[np.ndarray]], float]


def _floating(a: np.ndarray) -> bool:
    return bool(np.issubdtype(a.dtype, np.floating))


def gradcheck(
    op: Operator,
    inputs: Sequence[np.ndarray],
    *,
    grad_outputs: Sequence[np.ndarray] | None = None,
    eps: float = 1e-6,
    full_jacobian_max: int = 256,
    directions: int = 4,
    seed: int = 0,
    tolerance: Tolerance | None = None,
    names: Sequence[str] | None = None,
    wrt: Sequence[int] | None = None,
    allow_nonfinite: bool = False,
) -> list[GradientCheck]:
    """Compare ``op``'s backward with central differences of its forward, in float64.

    :param inputs: the point at which to check; floating arrays are cast to float64,
        integer and boolean ones (shapes, axes, labels, flags) are passed unchanged and
        their checks skipped.
    :param grad_outputs: cotangents of the outputs (cast to float64); by default seeded
        standard-normal values for floating outputs and zeros for the others.
    :param eps: the step ``h`` of the central differences.
    :param full_jacobian_max: inputs with at most this many elements are checked element
        by element; larger ones along random directions.
    :param directions: how many random directions for a large input.
    :param seed: seeds the default cotangents and the directions.
    :param tolerance: defaults to :data:`GRADCHECK_TOLERANCE`.
    :param names: input names, for the messages.
    :param wrt: indices of the inputs to check; all by default.
    :param allow_nonfinite: let non-finite gradients pass where the central differences
        give the same values; by default a NaN or infinity in backward's gradient fails the
        check (:func:`~d5core.validate.operators.check_arrays`).
    :return: one check per input. A floating input for which backward returns ``None``
        fails as ``missing``, unless the operator declares it has no gradient
        (:meth:`~d5core.levels.operators.Operator.declares_no_gradient`): then it is
        recorded as skipped.
    """
    tol = tolerance or GRADCHECK_TOLERANCE
    xs = [
        np.asarray(x, dtype=np.float64) if _floating(np.asarray(x)) else np.asarray(x)
        for x in inputs
    ]
    outputs = op.forward(xs)
    wrong = [
        str(np.asarray(y).dtype)
        for y in outputs
        if _floating(np.asarray(y)) and np.asarray(y).dtype != np.float64
    ]
    if grad_outputs is None:
        cotangents = default_grad_outputs(outputs, seed, np.float64)
    else:
        cotangents = [np.asarray(g, dtype=np.float64) for g in grad_outputs]
    used = [k for k, y in enumerate(outputs) if _floating(np.asarray(y))]

    def loss(arrays: list[np.ndarray]) -> float:
        ys = op.forward(arrays)
        return float(sum(np.vdot(cotangents[k], np.asarray(ys[k], np.float64)) for k in used))

    analytic = op.backward(cotangents, xs, outputs) if op.differentiable and not wrong else []
    # Directions come from their own stream, independent of the default cotangents.
    rng = np.random.default_rng([seed, 1])
    checks: list[GradientCheck] = []
    for i, x in enumerate(xs):
        if wrt is not None and i not in wrt:
            continue
        full = x.size <= full_jacobian_max
        check = GradientCheck(
            index=i,
            name=names[i] if names is not None and i < len(names) else "",
            method="full" if full else "directional",
        )
        checks.append(check)
        if wrong:
            check.passed, check.failed_metric = False, "dtype"
            check.detail = (
                f"the operator returned {', '.join(sorted(set(wrong)))} outputs for float64 "
                f"inputs; create it for float64 to check its gradients"
            )
            continue
        if not _floating(x):
            check.skipped = f"{x.dtype} input: not differentiable"
            continue
        grad = analytic[i] if i < len(analytic) else None
        if grad is None:
            _no_gradient(op, i, check)
            continue
        grad = np.asarray(grad, dtype=np.float64)
        if grad.shape != x.shape:
            check.passed, check.failed_metric = False, "shape"
            check.detail = f"backward gave shape {grad.shape} for an input of shape {x.shape}"
            continue
        if full:
            numeric = _full(loss, xs, i, eps)
            metrics, failed, why = check_arrays(grad, numeric, tol, allow_nonfinite=allow_nonfinite)
            if failed is not None:
                why = f"backward differs from central differences: {why}"
        else:
            vs = [rng.standard_normal(x.shape) for _ in range(directions)]
            vs = [v / np.linalg.norm(v) for v in vs]
            numeric = np.array([_directional(loss, xs, i, v, eps) for v in vs])
            projected = np.array([np.vdot(grad, v) for v in vs])
            metrics, failed, why = check_arrays(
                projected, numeric, tol, allow_nonfinite=allow_nonfinite
            )
            if failed is not None:
                why = f"<backward, v> differs from central differences along v: {why}"
        check.metrics, check.failed_metric, check.detail = metrics, failed, why
        check.passed = failed is None
    return checks


def _no_gradient(op: Operator, index: int, check: GradientCheck) -> None:
    """Record that backward gave no gradient for floating input ``index``: skipped where
    the operator declares none, a failure otherwise."""
    if op.declares_no_gradient(index):
        check.skipped = DECLARED_NO_GRADIENT
        return
    check.passed, check.failed_metric = False, "missing"
    check.detail = (
        "backward gives no gradient for this floating input; return one, or list the "
        "input in the operator's no_gradient_inputs if it has none by design"
    )


def _full(loss: _Loss, xs: list[np.ndarray], i: int, eps: float) -> np.ndarray:
    """dL/dx_i for every element of input ``i``, by central differences."""
    x = xs[i]
    numeric = np.empty(x.size)
    work = list(xs)
    for j in range(x.size):
        plus, minus = x.copy(), x.copy()
        plus.reshape(-1)[j] += eps
        minus.reshape(-1)[j] -= eps
        step = float(plus.reshape(-1)[j] - minus.reshape(-1)[j])
        work[i] = plus
        up = loss(work)
        work[i] = minus
        down = loss(work)
        numeric[j] = (up - down) / step
    return numeric.reshape(x.shape)


def _directional(loss: _Loss, xs: list[np.ndarray], i: int, v: np.ndarray, eps: float) -> float:
    """The derivative of L along ``v`` at input ``i``, by central differences."""
    work = list(xs)
    work[i] = xs[i] + eps * v
    up = loss(work)
    work[i] = xs[i] - eps * v
    down = loss(work)
    return (up - down) / (2 * eps)
