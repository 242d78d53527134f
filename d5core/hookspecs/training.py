"""Level 2 hooks: recipes, training runs and their schedules.

Datasets and optimizers are selected by name through the ``d5.datasets`` and
``d5.optimizers`` entry-point groups; these hooks let plugins take part in a run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from d5core.hookspecs._markers import hookspec

__all__ = ["d5_lr_schedules", "d5_recipe_loaded", "d5_run_finished"]


# -------------------------------------------------------------------------
# Recipes and runs
# -------------------------------------------------------------------------


@hookspec
def d5_recipe_loaded(recipe: Mapping[str, Any]) -> None:
    """Inspect a recipe after it was parsed and checked, before any work starts.

    :param recipe: the resolved recipe: its ``fixed``, ``mutable`` and ``metrics``
        sections and its content ``hash``. It is read-only: the FIXED part of a recipe is
        never changed by a plugin. Raise :class:`d5core.errors.UsageError` to refuse it.

    Return values are ignored.

    .. versionadded:: 1.0
    """


@hookspec
def d5_run_finished(run_id: str, status: str, metrics: Mapping[str, Any]) -> None:
    """Be told that a training run ended, after it was stored.

    :param run_id: the identifier of the run in the results store.
    :param status: ``complete``, ``failed``, ``diverged`` or ``incomplete``.
    :param metrics: the summarized metrics of the run, by metric name.

    Return values are ignored.

    .. versionadded:: 1.0
    """


@hookspec
def d5_lr_schedules() -> Mapping[str, Callable[..., Callable[[int], float]]] | None:
    """Contribute learning-rate schedules by name.

    A schedule factory takes keyword options and returns a function from the step number
    (starting at 0) to the learning rate.

    :return: a mapping from schedule name to factory, or ``None``.

    Not firstresult: all schedules are merged.

    .. versionadded:: 1.0
    """
