"""Level 0: validate operators against the reference and benchmark them across backends.

Backends are loaded by name from the ``d5.operators`` group; operators contributed through
the ``d5_custom_operators`` hook form one more backend named ``custom``. Inputs are made
once per problem from a seed and converted by each backend outside the timed region.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from d5core.errors import UsageError
from d5core.levels.operators import Operator, OperatorBackend, TensorDescriptor
from d5core.plugins import PluginManager, get_plugin_manager
from d5core.workloads.problems import Problem

__all__ = [
    "CUSTOM_BACKEND",
    "REFERENCE_BACKEND",
    "CustomBackend",
    "backend_by_name",
    "build_operator",
    "flops_of",
]

#: The backend every other one is validated against.
REFERENCE_BACKEND = "numpy"
#: The name under which operators from the ``d5_custom_operators`` hook are selected.
CUSTOM_BACKEND = "custom"


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
        operators, problems = manager.merged("d5_custom_operators")
        for problem in problems:
            import click

            click.echo(f"d5: warning: {problem}", err=True)
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
    descriptors = [TensorDescriptor.of(a) for a in inputs]
    return backend.create(problem.op, problem.attributes, descriptors)


def flops_of(problem: Problem, direction: str) -> int:
    """FLOPs of one pass: the forward count, doubled for a backward (two products)."""
    return problem.flops * (2 if direction == "backward" else 1)


Timed = Callable[[], object]
