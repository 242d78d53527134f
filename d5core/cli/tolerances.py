"""The ``--rtol``/``--atol`` options of ``d5 validate``, read into a tolerance."""

from __future__ import annotations

from typing import Any

__all__ = ["read_tolerances"]


def read_tolerances(rtol: float | None, atol: float | None, dtype: str) -> Any:
    """The ``Tolerance`` that ``--rtol``/``--atol`` ask for, or ``None`` for the defaults.

    :raises UsageError: for a negative, NaN or infinite value, which would pass anything.
    """
    from d5core.validate.operators import Tolerance, check_tolerance, tolerance_for

    if rtol is not None:
        check_tolerance("--rtol", rtol)
    if atol is not None:
        check_tolerance("--atol", atol)
    if rtol is None and atol is None:
        return None
    default = tolerance_for(dtype)
    return Tolerance(
        rtol=default.rtol if rtol is None else rtol, atol=default.atol if atol is None else atol
    )
