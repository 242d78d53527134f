"""The inputs a backend builds an operator's kernel for: one :class:`Signature` base.

A framework backend matches the arrays (or descriptors) it is given to the operator's
slots, settles the floating element type they share, and builds its kernel for that
match. :class:`Signature` holds the match; a backend subclasses it to add what only it
needs (a device, a cache key) and keeps everything framework-free here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from d5core.onnx.checks import InputSlot

__all__ = ["Signature"]


@dataclass(frozen=True)
class Signature:
    """The inputs of one call matched to the operator's slots."""

    #: One array (or descriptor) per input position; ``None`` for an absent optional one.
    arrays: tuple[Any, ...]
    #: The slot each input position fills.
    slots: tuple[InputSlot, ...]
    #: The floating element type the float inputs share, as the backend names it.
    dtype: Any
    #: False while only descriptors are known: input values must not be read yet.
    values_known: bool = True

    @property
    def shapes(self) -> tuple[tuple[int, ...] | None, ...]:
        """Each input's shape, ``None`` for an absent one."""
        return tuple(None if a is None else tuple(int(d) for d in a.shape) for a in self.arrays)

    def value(self, name: str) -> Any:
        """The array given for the (non-variadic) slot ``name``, or ``None``."""
        for slot, array in zip(self.slots, self.arrays, strict=True):
            if slot.name == name:
                return array
        return None
