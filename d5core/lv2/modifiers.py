"""Gradient modifiers: framework-free transformations applied before the optimizer step.

Each takes gradients by parameter name and returns new ones (inputs are not changed).
:func:`make_modifiers` chains them from a recipe's list, e.g.
``[{"name": "weight_decay", "decay": 5e-4}, {"name": "clip_norm", "max_norm": 5.0}]``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from d5core.errors import UsageError

__all__ = [
    "MODIFIERS",
    "Modifiers",
    "clip_by_global_norm",
    "clip_by_value",
    "global_norm",
    "make_modifiers",
    "weight_decay",
]

Arrays = Mapping[str, np.ndarray]


def weight_decay(grads: Arrays, params: Arrays, decay: float) -> dict[str, np.ndarray]:
    """L2 regularization: ``g + decay * p`` for every gradient."""
    return {k: g + np.asarray(decay, dtype=g.dtype) * params[k] for k, g in grads.items()}


def global_norm(grads: Arrays) -> float:
    """The L2 norm of all gradients taken together."""
    return math.sqrt(sum(float(np.sum(np.square(g, dtype=np.float64))) for g in grads.values()))


def clip_by_global_norm(grads: Arrays, max_norm: float) -> tuple[dict[str, np.ndarray], float]:
    """Scale all gradients together so their global norm is at most ``max_norm``.

    :return: the (possibly) scaled gradients, and the global norm before clipping.
    """
    norm = global_norm(grads)
    if norm <= max_norm or norm == 0.0:
        return {k: np.array(g) for k, g in grads.items()}, norm
    scale = max_norm / norm
    return {k: (g * scale).astype(g.dtype, copy=False) for k, g in grads.items()}, norm


def clip_by_value(grads: Arrays, limit: float) -> dict[str, np.ndarray]:
    """Clip every gradient element into ``[-limit, limit]``."""
    return {k: np.clip(g, -limit, limit) for k, g in grads.items()}


def _check_positive(name: str, option: str, value: Any, *, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise UsageError(f"modifier {name!r}: {option} must be a finite number, not {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise UsageError(f"modifier {name!r}: {option} must be positive, not {value!r}")
    return float(value)


#: Modifier names a spec may use, with their required option.
MODIFIERS: dict[str, str] = {
    "weight_decay": "decay",
    "clip_norm": "max_norm",
    "clip_value": "limit",
}


class Modifiers:
    """A chain of gradient modifiers, called as ``(params, grads) -> grads``.

    :attr:`last_norm` holds the global norm seen by the last ``clip_norm`` (before
    clipping), for metrics; ``None`` until one ran.
    """

    def __init__(self, steps: Sequence[tuple[str, float]]) -> None:
        self.steps = list(steps)
        self.last_norm: float | None = None

    def __call__(self, params: Arrays, grads: Arrays) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = dict(grads)
        for name, value in self.steps:
            if name == "weight_decay":
                out = weight_decay(out, params, value)
            elif name == "clip_norm":
                out, self.last_norm = clip_by_global_norm(out, value)
            else:
                out = clip_by_value(out, value)
        return out

    def __repr__(self) -> str:
        return f"Modifiers({self.steps!r})"


def make_modifiers(spec: Sequence[Mapping[str, Any]] | None) -> Modifiers:
    """Build the modifier chain of a recipe, applied in list order.

    :param spec: mappings with ``name`` (``weight_decay``, ``clip_norm``, ``clip_value``)
        and that modifier's one option (``decay``, ``max_norm``, ``limit``).
    :raises UsageError: one line naming an unknown modifier, option or bad value.
    """
    if spec is None:
        return Modifiers([])
    if isinstance(spec, Mapping | str) or not isinstance(spec, Sequence):
        raise UsageError(f"gradient modifiers are a list of mappings, not {spec!r}")
    steps: list[tuple[str, float]] = []
    for i, item in enumerate(spec):
        if not isinstance(item, Mapping):
            raise UsageError(f"gradient modifier #{i + 1} must be a mapping, not {item!r}")
        name = item.get("name")
        if name not in MODIFIERS:
            raise UsageError(
                f"unknown gradient modifier {name!r}; available: {', '.join(MODIFIERS)}"
            )
        option = MODIFIERS[name]
        extra = sorted(set(item) - {"name", option})
        if extra:
            raise UsageError(f"modifier {name!r} has no option {extra[0]!r}; its option: {option}")
        if option not in item:
            raise UsageError(f"modifier {name!r} needs option {option!r}")
        steps.append(
            (name, _check_positive(name, option, item[option], allow_zero=name == "weight_decay"))
        )
    return Modifiers(steps)
