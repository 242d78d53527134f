"""Validation of level-0 operators: against a reference, and by gradient checking.

:func:`validate_operator` compares a candidate operator's forward and backward with a
reference's (normally the numpy backend's) and checks the candidate's backward by central
differences with :func:`gradcheck`. The metrics, tolerances and method are described in
``docs/operators.md``.
"""

from __future__ import annotations

from d5core.validate.gradcheck import GRADCHECK_TOLERANCE, gradcheck
from d5core.validate.operators import (
    DECLARED_NO_GRADIENT,
    DEFAULT_TOLERANCES,
    GradientCheck,
    OutputCheck,
    Tolerance,
    Tolerances,
    ValidationReport,
    check_arrays,
    check_tolerance,
    compare_outputs,
    default_grad_outputs,
    error_metrics,
    nonfinite_summary,
    tolerance_for,
    validate_operator,
)

__all__ = [
    "DECLARED_NO_GRADIENT",
    "DEFAULT_TOLERANCES",
    "GRADCHECK_TOLERANCE",
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
    "gradcheck",
    "nonfinite_summary",
    "tolerance_for",
    "validate_operator",
]
