"""Learning-rate schedules: functions from the step number (from 0) to the learning rate.

The factories here build them in code; :func:`make_schedule` builds one from a recipe's
spec, a number (a constant rate) or a mapping such as ``{"name": "cosine", "lr": 0.1}``.
Plugins add schedules through the ``d5_lr_schedules`` hook.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from typing import Any

from d5core.errors import UsageError

__all__ = [
    "BUILTIN_SCHEDULES",
    "Schedule",
    "constant",
    "cosine",
    "from_callable",
    "make_schedule",
    "step",
    "warmup",
]

#: A learning-rate schedule: the step number (from 0) to the learning rate.
Schedule = Callable[[int], float]


def _is_count(value: object) -> bool:
    """Whether ``value`` is a whole number (an ``int``, not a ``bool``)."""
    return isinstance(value, int) and not isinstance(value, bool)


def constant(lr: float) -> Schedule:
    """``lr`` at every step."""
    value = float(lr)
    return lambda t: value


def step(lr: float, step_size: int, gamma: float = 0.1) -> Schedule:
    """``lr * gamma ** (t // step_size)``: decay by ``gamma`` every ``step_size`` steps."""
    if not _is_count(step_size) or step_size <= 0:
        raise UsageError(
            f"schedule 'step': step_size must be positive, a whole number of steps, not "
            f"{step_size!r}"
        )
    return lambda t: float(lr) * float(gamma) ** (t // step_size)


def cosine(lr: float, total_steps: int, min_lr: float = 0.0) -> Schedule:
    """Cosine annealing from ``lr`` at step 0 to ``min_lr`` at ``total_steps`` (and after)."""
    if not _is_count(total_steps) or total_steps <= 0:
        raise UsageError(
            f"schedule 'cosine': total_steps must be positive, a whole number, not {total_steps!r}"
        )

    def schedule(t: int) -> float:
        frac = min(max(t, 0), total_steps) / total_steps
        return float(min_lr + (lr - min_lr) * (1 + math.cos(math.pi * frac)) / 2)

    return schedule


def warmup(schedule: Schedule, warmup_steps: int, start_factor: float = 0.1) -> Schedule:
    """Scale ``schedule`` linearly from ``start_factor`` at step 0 to 1 at ``warmup_steps``.

    At step ``t < warmup_steps`` the rate is
    ``schedule(t) * (start_factor + (1 - start_factor) * t / warmup_steps)``; afterwards it
    is ``schedule(t)`` unchanged (PyTorch's ``LinearLR`` factor).
    """
    if not _is_count(warmup_steps) or warmup_steps < 0:
        raise UsageError(
            f"schedule 'warmup': warmup_steps must be a whole number >= 0, not {warmup_steps!r}"
        )

    def warmed(t: int) -> float:
        if t >= warmup_steps:
            return schedule(t)
        return schedule(t) * (start_factor + (1 - start_factor) * t / warmup_steps)

    return warmed


def from_callable(fn: Callable[[int], float]) -> Schedule:
    """A schedule from any per-step callable; its values are made floats."""
    if not callable(fn):
        raise UsageError(f"a schedule must be callable with the step number, not {fn!r}")
    return lambda t: float(fn(t))


def _warmup_spec(
    schedule: Mapping[str, Any] | float,
    warmup_steps: int,
    start_factor: float = 0.1,
    *,
    total_steps: int | None = None,
) -> Schedule:
    return warmup(make_schedule(schedule, total_steps=total_steps), warmup_steps, start_factor)


#: The schedules d5 offers itself, by the name a spec selects them with.
BUILTIN_SCHEDULES: dict[str, Callable[..., Schedule]] = {
    "constant": constant,
    "step": step,
    "cosine": cosine,
    "warmup": _warmup_spec,
}


def _available() -> dict[str, Callable[..., Schedule]]:
    """Every schedule, from the ``d5_lr_schedules`` hook: :data:`BUILTIN_SCHEDULES`
    comes from d5's internal ``builtins`` plugin and is kept on a name a plugin offers
    too (the clash is reported). An entry that is not callable is left out."""
    from d5core.plugins import get_plugin_manager

    offered = get_plugin_manager().merged("d5_lr_schedules")
    return {k: v for k, v in offered.items() if callable(v)}


def make_schedule(spec: Mapping[str, Any] | float, *, total_steps: int | None = None) -> Schedule:
    """Build a schedule from a recipe spec.

    :param spec: a number (a constant rate) or a mapping with ``name`` and the factory's
        options, e.g. ``{"name": "step", "lr": 0.1, "step_size": 30, "gamma": 0.1}``.
        ``warmup`` wraps another spec:
        ``{"name": "warmup", "schedule": {...}, "warmup_steps": 500, "start_factor": 0.1}``.
        Names come from d5 and from plugins' ``d5_lr_schedules`` hook.
    :param total_steps: the run's length, passed to a factory that takes ``total_steps``
        when the spec does not give it.
    :raises UsageError: one line naming an unknown schedule, option or bad value.
    """
    if isinstance(spec, int | float) and not isinstance(spec, bool):
        return _checked("constant", constant(float(spec)), total_steps)
    if not isinstance(spec, Mapping):
        raise UsageError(f"a learning-rate schedule is a number or a mapping, not {spec!r}")
    options = dict(spec)
    name = options.pop("name", None)
    available = _available()
    if name not in available:
        raise UsageError(
            f"unknown learning-rate schedule {name!r}; available: {', '.join(sorted(available))}"
        )
    factory = available[name]
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        params = {}  # type: ignore[assignment]
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    if params and not takes_any:
        unknown = sorted(set(options) - set(params))
        if unknown:
            raise UsageError(
                f"schedule {name!r} has no option {unknown[0]!r}; its options: "
                f"{', '.join(p for p in params if p != 'total_steps' or name != 'warmup')}"
            )
    if (
        total_steps is not None
        and "total_steps" not in options
        and ("total_steps" in params or takes_any)
    ):
        options["total_steps"] = total_steps
    try:
        schedule = factory(**options)
    except UsageError:
        raise
    except TypeError as exc:
        raise UsageError(f"schedule {name!r}: {exc}") from None
    if not callable(schedule):
        raise UsageError(f"schedule {name!r} did not build a callable schedule")
    return _checked(str(name), schedule, total_steps)


def _probe_steps(total_steps: int | None) -> list[int]:
    """The steps a new schedule is tried at before a run: its start, and across the run."""
    steps = {0, 1, 2, 10, 100}
    if total_steps is not None and total_steps > 0:
        steps |= {total_steps * k // 8 for k in range(9)} | {total_steps - 1}
    return sorted(t for t in steps if t >= 0)


def _check_rate(name: str, t: int, value: Any) -> float:
    """``value``, the rate of schedule ``name`` at step ``t``, as a float; refused when it
    is not a finite, non-negative number."""
    try:
        rate = float(value)
    except (TypeError, ValueError):
        raise UsageError(
            f"schedule {name!r} gives {value!r} at step {t}, not a number; fix its options"
        ) from None
    if not math.isfinite(rate) or rate < 0:
        raise UsageError(
            f"schedule {name!r} gives the learning rate {rate!r} at step {t}; a learning "
            f"rate must be a finite number >= 0: fix the schedule's options (lr, min_lr, "
            f"gamma, start_factor)"
        )
    return rate


def _checked(name: str, schedule: Schedule, total_steps: int | None) -> Schedule:
    """``schedule``, tried at a few steps now and checked at every step it is asked for:
    a negative, infinite or NaN learning rate is bad input, not a run to store."""
    for t in _probe_steps(total_steps):
        try:
            value = schedule(t)
        except UsageError:
            raise
        except Exception as exc:
            raise UsageError(
                f"schedule {name!r} fails at step {t}: {type(exc).__name__}: "
                f"{' '.join(str(exc).split())}; fix its options"
            ) from None
        _check_rate(name, t, value)

    def checked(t: int) -> float:
        return _check_rate(name, t, schedule(t))

    return checked
