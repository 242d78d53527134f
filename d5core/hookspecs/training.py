"""Level 2 hooks: recipes, training runs and their schedules.

Datasets and optimizers are selected by name through the ``d5.datasets`` and
``d5.optimizers`` entry-point groups; these hooks let plugins take part in a run.

To be told that a run ended, implement ``d5_result_stored`` (in ``results``): it is
called for every run of every kind once it is committed, with the run's id and the store
to read its status and metrics from. (A training-only ``d5_run_finished`` hook was
specified before 1.0 but never called; it was removed rather than kept beside
``d5_result_stored``.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from d5core.hookspecs._markers import hookspec, propagates

__all__ = ["d5_lr_schedules", "d5_recipe_loaded"]


# -------------------------------------------------------------------------
# Recipes and runs
# -------------------------------------------------------------------------


@propagates
@hookspec
def d5_recipe_loaded(recipe: Mapping[str, Any]) -> None:
    """Inspect a recipe after it was parsed and checked, before any work starts.

    Called by :func:`d5core.lv2.recipes.load_recipe`, once per recipe file loaded
    (``d5 run`` loads it once per process, so once per rank of a run on several ranks).

    :param recipe: the recipe as loaded from its file, read-only: ``name``, ``path``,
        ``form`` (``"toml"`` or ``"python"``), the ``fixed``, ``mutable`` and ``metrics``
        sections and the content ``hash``. ``--set`` overrides, which may change MUTABLE
        keys only, are applied afterwards. The FIXED part of a recipe is never changed by
        a plugin.

    Raising ends the call and reaches the caller: raise
    :class:`d5core.errors.UsageError` with one line saying why to refuse the recipe.

    Return values are ignored.

    .. versionadded:: 1.0
    """


@hookspec
def d5_lr_schedules() -> Mapping[str, Callable[..., Callable[[int], float]]] | None:
    """Contribute learning-rate schedules by name.

    A schedule factory takes keyword options and returns a function from the step number
    (starting at 0) to the learning rate.

    :return: a mapping from schedule name to factory, or ``None``.

    Not firstresult: the mappings of all plugins are merged by name. d5's own schedules
    (``constant``, ``step``, ``cosine``, ``warmup``) come before every plugin's ordinary
    implementation (d5's internal ``builtins`` plugin implements this hook
    ``tryfirst``); a name offered a second time is left out and reported as a clash
    naming both plugins.

    .. versionadded:: 1.0
    """
