"""An operator whose inputs are described by ONNX slots: the helpers every backend's
operator base class shares.

:class:`SlottedOperator` adds to :class:`~d5core.levels.operators.Operator` what a
framework backend's operators need before any framework call: the ``slots`` and
``attribute_defaults`` of the ONNX operator (see :func:`d5core.api.onnx_signature`),
attribute reading, one-line ``UsageError`` s that start with the operator type, rank
checks, and which inputs have no gradient by design. A backend subclasses it once (as
its own operator base) and keeps only what touches its framework.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Protocol

from d5core.errors import UsageError
from d5core.levels.operators import Operator
from d5core.onnx.checks import (
    InputSlot,
    check_rank,
    int_list_attribute,
    slot_has_no_gradient,
)

__all__ = ["SlottedOperator"]


class _Matched(Protocol):
    """What :meth:`SlottedOperator.require_rank` reads of a backend's signature."""

    @property
    def shapes(self) -> tuple[tuple[int, ...] | None, ...]: ...

    @property
    def slots(self) -> tuple[InputSlot, ...]: ...


class SlottedOperator(Operator):
    """An :class:`~d5core.levels.operators.Operator` with ONNX input slots and attribute
    defaults, and the checks a backend's operators share."""

    #: The inputs, in ONNX order.
    slots: ClassVar[tuple[InputSlot, ...]] = ()
    #: Every attribute the operator understands, with the ONNX default (``None``: none).
    attribute_defaults: ClassVar[Mapping[str, Any]] = {}

    def attr(self, name: str) -> Any:
        """The attribute ``name``, or its ONNX default (bytes decoded)."""
        value = self.attributes.get(name, self.attribute_defaults[name])
        return value.decode() if isinstance(value, bytes) else value

    def ints(self, name: str) -> list[int] | None:
        """An integer-list attribute, or ``None`` when neither given nor defaulted."""
        return int_list_attribute(self.op_type, name, self.attr(name))

    def fail(self, message: str) -> UsageError:
        """A ``UsageError`` whose message starts with the operator type."""
        return UsageError(f"{self.op_type}: {message}")

    def format_shape(self, shape: Sequence[int]) -> str:
        """How messages write a shape (by default, as a Python tuple)."""
        return str(tuple(int(d) for d in shape))

    def require_rank(
        self,
        sig: _Matched,
        index: int,
        ranks: Sequence[int] = (),
        *,
        at_least: int = 0,
        what: str = "",
    ) -> tuple[int, ...]:
        """The shape of input ``index``, whose rank must be one of ``ranks`` (when given)
        and at least ``at_least``; ``what`` describes the expected axes."""
        shape = sig.shapes[index]
        assert shape is not None
        name = sig.slots[index].name
        shown = self.format_shape(shape)
        check_rank(self.op_type, name, shape, ranks, at_least=at_least, what=what, shown=shown)
        return shape

    def declares_no_gradient(self, index: int) -> bool:
        """Whether input ``index`` has no gradient by design: besides the declarations of
        :class:`~d5core.api.Operator`, an input in a ``"static"``, ``"index"`` or
        ``"bool"`` slot or in one marked not ``differentiable``."""
        if super().declares_no_gradient(index):
            return True
        return slot_has_no_gradient(self.slots, index)
