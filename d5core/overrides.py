"""Numbers a user sets through environment variables instead of letting d5 measure them.

``D5_PEAK_GFLOPS``, ``D5_PEAK_BANDWIDTH`` and ``D5_NOISE_FLOOR`` all follow one rule, kept
here: unset or blank means "measure it"; anything else must parse as a number that the
variable accepts, or d5 stops with a one-line :class:`~d5core.errors.UsageError` that
names the variable, the value given and how to fix it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping

from d5core.errors import UsageError

__all__ = ["is_positive_number", "number_from_env"]


def is_positive_number(value: object) -> bool:
    """Whether ``value`` is an ``int`` or ``float`` that is finite and above zero."""
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


def number_from_env(
    name: str,
    *,
    must_be: str,
    unset_to: str,
    accept: Callable[[float], bool] = is_positive_number,
    environ: Mapping[str, str] | None = None,
) -> float | None:
    """The number the environment variable ``name`` sets, or ``None`` where it is unset
    or blank.

    :param must_be: what the value must be, as the error says it ("a positive number of
        GB/s").
    :param unset_to: what unsetting the variable does instead ("measure this machine's
        peak").
    :param accept: whether a parsed value is allowed (by default: finite and positive);
        text that is not a number is never accepted.
    :param environ: where to read ``name`` (``os.environ`` by default).
    :raises UsageError: for a value that is not a number ``accept`` allows.
    """
    raw = (os.environ if environ is None else environ).get(name, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if math.isnan(value) or not accept(value):
        raise UsageError(
            f"{name} must be {must_be}, not {raw!r}; fix it, or unset it to {unset_to}"
        )
    return value
