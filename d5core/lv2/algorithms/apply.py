"""A recipe's ``algorithm`` key: the algorithm's choices become the run's MUTABLE values.

When a recipe (or ``--set``) names an ``algorithm``, that algorithm owns the training
choices of :data:`ALGORITHM_KEYS`: the recipe's own MUTABLE values of those keys are
replaced by what the algorithm's ``settings(workload, hyperparameters)`` returns, and
``batch_size`` by its ``get_batch_size(workload)`` unless that is ``None``. The workload
is the recipe's name. ``hyperparameters`` is checked against the algorithm's search
space and completed with its defaults, so the stored MUTABLE section says everything a
repeat needs. A key the algorithm sets that the user also sets with ``--set``, or that
FIXED freezes, is a one-line error. The executor, the evaluation batch size and the seed
stay the competitor's.
"""

from __future__ import annotations

import inspect
from collections.abc import Collection, Mapping
from typing import Any

from d5core.errors import UsageError

__all__ = ["ALGORITHM_KEYS", "apply_algorithm", "owned_keys", "trainer_hooks"]

#: The MUTABLE keys an algorithm's ``settings`` may set (and, once it is chosen, owns).
ALGORITHM_KEYS = ("optimizer", "lr", "optimizer_options", "schedule", "modifiers", "transforms")
#: The optional methods of an algorithm the trainer calls while training.
_HOOKS = ("prepare_for_eval", "data_selection")


def owned_keys(merged: Mapping[str, Any]) -> tuple[str, ...]:
    """The keys an ``algorithm`` among the settings ``merged`` provides, so that the
    recipe need not: :data:`ALGORITHM_KEYS`, or none without an algorithm."""
    return ALGORITHM_KEYS if merged.get("algorithm") is not None else ()


def _chosen(recipe: str, name: str, algorithm: Any, point: Mapping[str, Any]) -> dict[str, Any]:
    """What the algorithm sets for the workload ``recipe``, checked."""
    try:
        chosen = algorithm.settings(recipe, dict(point))
    except UsageError:
        raise
    except Exception as exc:
        raise UsageError(
            f"algorithm {name!r} failed to give its settings for {recipe}: "
            f"{type(exc).__name__}: {' '.join(str(exc).split())}"
        ) from None
    if not isinstance(chosen, Mapping):
        raise UsageError(f"algorithm {name!r}: settings() returned {chosen!r}, not a table")
    chosen = dict(chosen)
    stray = sorted(set(chosen) - set(ALGORITHM_KEYS))
    if stray:
        raise UsageError(
            f"algorithm {name!r} sets {stray[0]!r}, which an algorithm may not set; it may "
            f"set {', '.join(ALGORITHM_KEYS)} (and the batch size with get_batch_size)"
        )
    batch = algorithm.get_batch_size(recipe)
    if batch is not None:
        if isinstance(batch, bool) or not isinstance(batch, int) or batch <= 0:
            raise UsageError(
                f"algorithm {name!r}: get_batch_size({recipe!r}) returned {batch!r}, not a "
                "positive integer or None"
            )
        chosen["batch_size"] = batch
    return chosen


def apply_algorithm(
    recipe: str,
    fixed: Mapping[str, Any],
    mutable: Mapping[str, Any],
    explicit: Collection[str] = (),
) -> dict[str, Any]:
    """The MUTABLE section of recipe ``recipe`` once its algorithm has chosen.

    :param explicit: the keys the user set (``--set``; ``lr`` for ``--set lr=...`` and
        ``optimizer_options`` for ``--set optimizer_options.momentum=...``).
    :return: ``mutable`` unchanged without an algorithm; else with the algorithm's
        settings, its batch size, and ``hyperparameters`` completed.
    :raises UsageError: for an unknown algorithm, ``hyperparameters`` that are not a
        table, outside the search space, or given without an algorithm, and a key set
        both by the algorithm and by the user or FIXED.
    """
    from d5core.lv2.algorithms.registry import algorithm_names, load_algorithm
    from d5core.lv2.algorithms.search_space import complete_point

    merged = {**fixed, **mutable}
    name = merged.get("algorithm")
    given = merged.get("hyperparameters")
    if name is None:
        if given is not None:
            raise UsageError(
                f"recipe {recipe}: hyperparameters need an algorithm; set one with --set "
                f"algorithm=NAME ({', '.join(algorithm_names())})"
            )
        return dict(mutable)
    if not isinstance(name, str):
        raise UsageError(f"recipe {recipe}: algorithm must be a name (string), got {name!r}")
    if given is None:
        given = {}
    if not isinstance(given, Mapping):
        raise UsageError(
            f"recipe {recipe}: hyperparameters must be a table, got {given!r}; write "
            "--set hyperparameters.lr=0.01 or --set 'hyperparameters={\"lr\": 0.01}'"
        )
    algorithm = load_algorithm(name)
    point = complete_point(
        algorithm.search_space, given, where=f"recipe {recipe}: algorithm {name}"
    )
    chosen = _chosen(recipe, name, algorithm, point)
    for key in chosen:
        if key in fixed:
            raise UsageError(
                f"recipe {recipe} freezes {key} in FIXED, and algorithm {name} sets it; use "
                f"a recipe that leaves {key} MUTABLE, or no algorithm"
            )
        if key in explicit:
            raise UsageError(
                f"--set {key} conflicts with algorithm {name}, which sets {key}; drop "
                f"--set {key} (tune the algorithm through hyperparameters)"
            )
    out = {k: v for k, v in mutable.items() if k not in ALGORITHM_KEYS or k in explicit}
    out.update(chosen)
    if "hyperparameters" not in fixed:
        out["hyperparameters"] = point
    return out


def trainer_hooks(settings: Mapping[str, Any], trainer: Any) -> dict[str, Any]:
    """The keyword arguments that hand the run's algorithm's ``prepare_for_eval`` and
    ``data_selection`` to ``trainer`` (the Trainer class): only the methods the
    algorithm overrides, so that an algorithm without them trains exactly as its
    settings alone would.

    :raises UsageError: when the algorithm overrides one that ``trainer`` does not take.
    """
    name = settings.get("algorithm")
    if name is None:
        return {}
    from d5core.levels.training import TrainingAlgorithm
    from d5core.lv2.algorithms.registry import load_algorithm

    algorithm = load_algorithm(str(name))
    taken = inspect.signature(trainer).parameters
    hooks: dict[str, Any] = {}
    for hook in _HOOKS:
        if getattr(type(algorithm), hook) is getattr(TrainingAlgorithm, hook):
            continue
        if hook not in taken:
            raise UsageError(
                f"algorithm {name} defines {hook}, which this d5's trainer does not call; "
                "update d5core"
            )
        hooks[hook] = getattr(algorithm, hook)
    return hooks
