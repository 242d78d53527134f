"""Level 0 hooks: single operators, their shapes and their validation.

Operator backends themselves are selected by name through the ``d5.operators``
entry-point group; these hooks let any plugin extend what level 0 works with.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from d5core.hookspecs._markers import hookspec

if TYPE_CHECKING:
    from d5core.levels.operators import Operator

__all__ = ["d5_custom_operators", "d5_operator_shape_suites", "d5_operator_validated"]


# -------------------------------------------------------------------------
# Operators and workloads
# -------------------------------------------------------------------------


@hookspec
def d5_custom_operators() -> Mapping[str, type[Operator]] | None:
    """Contribute operators written in Python, by operator type name.

    A custom operator subclasses :class:`d5core.levels.operators.Operator`; it can then be
    validated against the reference and benchmarked like a framework's own operator. The
    names follow ONNX operator types where the operator has an ONNX counterpart, so that
    the reference implementation of that name is what it is checked against.

    :return: a mapping from operator type name to operator class, or ``None``.

    Not firstresult: the mappings of all plugins are merged by name; a name offered a
    second time is left out and reported as a clash naming both plugins. They are
    selected together as the backend ``custom`` (``d5 validate op NAME --backend custom``).

    .. versionadded:: 1.0
    """


@hookspec
def d5_operator_shape_suites() -> Mapping[str, Sequence[Mapping[str, Any]]] | None:
    """Contribute named suites of operator problems (shapes and attributes).

    d5 ships the DeepBench training GEMM and convolution sets; a plugin can add the
    shapes of its own workload so that ``d5 bench op --suite NAME`` runs them.

    :return: a mapping from suite name to a sequence of problems; each problem is a
        mapping with at least ``op`` (the operator type) and ``shapes`` (the input shapes),
        and optionally ``attributes``, ``name`` and ``flops``, or a
        :class:`d5core.lv0.workloads.problems.Problem`. ``None`` contributes nothing.

    Not firstresult: the mappings of all plugins are merged by name. d5's own suites
    (the DeepBench sets and ``cpu-small``) come before every plugin's ordinary
    implementation (d5's internal ``builtins`` plugin implements this hook
    ``tryfirst``); a name offered a second time is left out and reported as a clash
    naming both plugins.

    .. versionadded:: 1.0
    """


# -------------------------------------------------------------------------
# Notifications
# -------------------------------------------------------------------------


@hookspec
def d5_operator_validated(op_type: str, backend: str, report: Mapping[str, Any]) -> None:
    """Be told the outcome of validating an operator against the reference.

    Called by :func:`d5core.lv0.runner.validate_op` (so by ``d5 validate op`` and
    by any library caller) after every validation, passed or failed, right after the
    ``validation`` event (level 0) is published on the metric bus. Validating a network
    (``d5 validate net``, :func:`d5core.lv1.runner.validate_network`) publishes
    the same event with level 1 and its report; subscribe to it with
    :func:`d5_bus_subscribe`.

    :param op_type: the operator type that was validated, for example ``"Conv"``.
    :param backend: the name of the backend whose operator was checked.
    :param report: the validation report as stored: ``passed``, the error metrics per
        output and the gradient-check results per input.

    Return values are ignored.

    .. versionadded:: 1.0
    """
