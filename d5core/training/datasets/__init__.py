"""Datasets by name: the ``d5.datasets`` entry points and the built-in readers.

Each entry of the ``d5.datasets`` group is a factory ``(split, **options) -> Dataset``;
:func:`load_dataset` finds it by name and checks the split and options first.
"""

from __future__ import annotations

import inspect
from typing import Any

from d5core.errors import UsageError
from d5core.levels.training import Dataset
from d5core.training.datasets.arrays import ArrayDataset

__all__ = ["ArrayDataset", "check_options", "load_dataset"]

GROUP = "d5.datasets"


def check_options(what: str, factory: Any, options: dict[str, Any], skip: int = 0) -> None:
    """Raise a one-line :class:`UsageError` when ``factory`` takes no option in ``options``.

    :param skip: leading positional parameters that are not options.
    """
    try:
        params = list(inspect.signature(factory).parameters.values())[skip:]
    except (TypeError, ValueError):
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return
    known = [p.name for p in params if p.kind is not inspect.Parameter.VAR_POSITIONAL]
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise UsageError(
            f"{what} has no option {unknown[0]!r}; its options: {', '.join(known) or 'none'}"
        )
    missing = [
        p.name
        for p in params
        if p.default is inspect.Parameter.empty
        and p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        and p.name not in options
    ]
    if missing:
        raise UsageError(f"{what} needs the option {missing[0]!r}")


def load_dataset(name: str, split: str = "train", **options: Any) -> Dataset:
    """The split ``split`` of the dataset ``name``, built with ``options``.

    :raises UsageError: one line, for an unknown dataset (naming the installed ones),
        an unknown split, an unknown or missing option, or missing or corrupt files.
    """
    from d5core.plugins.manager import get_plugin_manager

    factory = get_plugin_manager().load(GROUP, name)
    check_options(f"dataset {name!r}", factory, options, skip=1)
    dataset = factory(split, **options)
    if not isinstance(dataset, Dataset):
        raise UsageError(
            f"dataset {name!r} returned {type(dataset).__name__}, not a Dataset; "
            f"its plugin is broken"
        )
    return dataset
