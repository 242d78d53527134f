"""Find a training algorithm by name: a ``d5.algorithms`` entry, else a baseline.

A ``d5.algorithms`` entry of a name wins over the baseline of the optimizer of that name
(:mod:`.baselines`). Every algorithm handed out has a search space that
:func:`~d5core.lv2.algorithms.search_space.parse_space` accepts.
"""

from __future__ import annotations

from d5core.errors import UsageError
from d5core.levels.training import ALGORITHMS_GROUP, TrainingAlgorithm

__all__ = ["algorithm_names", "load_algorithm"]


def algorithm_names() -> list[str]:
    """Every algorithm a recipe can name: the usable ``d5.algorithms`` entries and the
    baselines, sorted."""
    from d5core.lv2.algorithms.baselines import baseline_names
    from d5core.plugins import get_plugin_manager

    entries = get_plugin_manager().names(ALGORITHMS_GROUP)
    return sorted({*entries, *baseline_names()})


def _entry(name: str) -> type[TrainingAlgorithm] | None:
    """The ``d5.algorithms`` entry ``name``, or ``None`` when none has that name.

    :raises PluginError: for an entry that is disabled, broken or fails to import.
    """
    from d5core.plugins import get_plugin_manager

    manager = get_plugin_manager()
    if not any(r.group == ALGORITHMS_GROUP and r.name == name for r in manager.records):
        return None
    cls = manager.load(ALGORITHMS_GROUP, name)
    if not (isinstance(cls, type) and issubclass(cls, TrainingAlgorithm)):
        raise UsageError(
            f"algorithm {name!r} (d5.algorithms) is {cls!r}, not a TrainingAlgorithm "
            "subclass; its plugin is broken"
        )
    return cls


def load_algorithm(name: str) -> TrainingAlgorithm:
    """The algorithm ``name``, built with no arguments.

    :raises UsageError: one line, for an unknown name (listing the known ones), a broken
        entry, or an algorithm whose search space is malformed.
    """
    from d5core.lv2.algorithms.baselines import baseline_class
    from d5core.lv2.algorithms.search_space import parse_space

    cls = _entry(name) or baseline_class(name)
    if cls is None:
        raise UsageError(
            f"unknown algorithm {name!r}; known: {', '.join(algorithm_names()) or 'none'} "
            "(d5.algorithms entries, and every local optimizer as a baseline)"
        )
    try:
        algorithm = cls()
    except TypeError as exc:
        raise UsageError(f"algorithm {name!r} cannot be built without arguments: {exc}") from None
    parse_space(algorithm.search_space, where=f"algorithm {name!r}: search space")
    return algorithm
