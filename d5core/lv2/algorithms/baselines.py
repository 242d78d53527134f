"""d5's optimizers as baseline training algorithms, without rewriting them.

Every local optimizer in ``d5.optimizers`` (numpy ``momentum``, ``torch-adam``,
``tf-adamw``, ...) is an algorithm of the same name: it trains with that optimizer, the
learning rate and options a point of its search space gives, and the recipe's own
batch size. The search space comes from the optimizer's family, read from its name (the
part after a framework prefix such as ``torch-``): ``spaces/<family>.toml``, or
``spaces/default.toml`` (the learning rate only) for a family d5 does not know.
Distribution schemes (``DistributedOptimizer`` subclasses: allreduce,
parameter-server, ...) wrap an optimizer and are not baselines.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any, ClassVar, cast

import tomllib

from d5core.levels.training import TrainingAlgorithm
from d5core.lv2.algorithms.search_space import parse_space

__all__ = [
    "FAMILIES",
    "BaselineAlgorithm",
    "baseline_class",
    "baseline_names",
    "family_of",
    "family_space",
]

#: The optimizer families with a search space of their own (``spaces/<family>.toml``).
FAMILIES = ("sgd", "momentum", "nesterov", "adam", "adamw", "adagrad", "rmsprop")
_OPTIMIZERS = "d5.optimizers"


def family_of(optimizer: str) -> str | None:
    """The family of the optimizer named ``optimizer`` (``torch-adamw`` -> ``adamw``), or
    ``None`` when the name is none of :data:`FAMILIES`, with or without a prefix."""
    if optimizer in FAMILIES:
        return optimizer
    _, sep, rest = optimizer.partition("-")
    return rest if sep and rest in FAMILIES else None


@cache
def family_space(family: str | None) -> dict[str, Any]:
    """The default search space of ``family`` (``None``: an unknown family)."""
    name = family if family in FAMILIES else "default"
    text = resources.files("d5core.lv2.algorithms").joinpath("spaces", f"{name}.toml")
    space = tomllib.loads(text.read_text(encoding="utf-8"))["search_space"]
    return parse_space(space, where=f"the {name} baseline's search space")


class BaselineAlgorithm(TrainingAlgorithm):
    """A ``d5.optimizers`` entry as an algorithm: ``lr`` is the learning rate and every
    other hyperparameter an option of the optimizer (``optimizer_options``)."""

    #: The ``d5.optimizers`` entry it trains with.
    optimizer: ClassVar[str] = ""

    def settings(self, workload: str, hyperparameters: Mapping[str, Any]) -> dict[str, Any]:
        """``optimizer``, ``lr`` and ``optimizer_options`` from ``hyperparameters``."""
        options = {k: v for k, v in hyperparameters.items() if k != "lr"}
        return {
            "optimizer": self.optimizer,
            "lr": hyperparameters["lr"],
            "optimizer_options": options,
        }


def _is_local_optimizer(name: str) -> bool:
    """Whether the ``d5.optimizers`` entry ``name`` loads and is not a distribution
    scheme. A name of a known family is taken as local without importing it (that would
    import its framework)."""
    if family_of(name) is not None:
        return True
    from d5core.levels.distributed import DistributedOptimizer
    from d5core.levels.training import Optimizer
    from d5core.plugins import get_plugin_manager

    try:
        cls = get_plugin_manager().load(_OPTIMIZERS, name)
    except Exception:  # a broken entry is no baseline; d5 list-plugins says why
        return False
    return (
        isinstance(cls, type)
        and issubclass(cls, Optimizer)
        and not issubclass(cls, DistributedOptimizer)
    )


def baseline_names() -> list[str]:
    """The usable ``d5.optimizers`` entries that are baselines, sorted."""
    from d5core.plugins import get_plugin_manager

    return [n for n in get_plugin_manager().names(_OPTIMIZERS) if _is_local_optimizer(n)]


def baseline_class(name: str) -> type[BaselineAlgorithm] | None:
    """The baseline algorithm of the optimizer ``name``, or ``None`` when no usable
    local optimizer has that name."""
    from d5core.plugins import get_plugin_manager

    if name not in get_plugin_manager().names(_OPTIMIZERS) or not _is_local_optimizer(name):
        return None
    attrs = {
        "name": name,
        "optimizer": name,
        "search_space": family_space(family_of(name)),
        "__doc__": f"The optimizer {name!r} as a baseline algorithm.",
    }
    return cast(type[BaselineAlgorithm], type(f"Baseline[{name}]", (BaselineAlgorithm,), attrs))
