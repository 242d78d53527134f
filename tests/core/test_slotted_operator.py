"""``SlottedOperator``: the base a backend's operators share (``d5core.api``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pytest

from d5core.api import UsageError
from d5core.onnx import InputSlot, SlottedOperator, onnx_signature


class Scale(SlottedOperator):
    op_type = "Scale"
    slots = (
        InputSlot("X"),
        InputSlot("factor", kind="static"),
        InputSlot("w", differentiable=False),
    )
    attribute_defaults: ClassVar[Mapping[str, Any]] = {
        "mode": b"fast",
        "axes": None,
        "pads": (1, 2),
    }

    def forward(self, inputs):
        return [np.asarray(inputs[0]) * 2]


@dataclass(frozen=True)
class Matched:
    shapes: tuple[tuple[int, ...] | None, ...]
    slots: tuple[InputSlot, ...]


def test_attributes_fall_back_to_their_defaults_and_bytes_are_decoded():
    op = Scale({"axes": [0, np.int64(1)]})
    assert op.attr("mode") == "fast"
    assert op.ints("axes") == [0, 1] and op.ints("pads") == [1, 2]
    assert Scale().ints("axes") is None
    with pytest.raises(UsageError, match=r"^Scale: attribute 'axes' must be a list of integers"):
        Scale({"axes": "x"}).ints("axes")


def test_errors_start_with_the_operator_type():
    assert str(Scale().fail("bad input")) == "Scale: bad input"


def test_require_rank_writes_shapes_the_way_the_backend_does():
    sig = Matched(((2, 3), (5,)), Scale.slots[:2])
    assert Scale().require_rank(sig, 0, (2,)) == (2, 3)
    with pytest.raises(
        UsageError, match=r"^Scale: input factor must have rank 2, got shape \(5,\)$"
    ):
        Scale().require_rank(sig, 1, (2,))

    class Bare(Scale):
        def format_shape(self, shape):
            return "x".join(map(str, shape))

    with pytest.raises(UsageError, match=r"got shape 5$"):
        Bare().require_rank(sig, 1, at_least=2)


def test_static_and_non_differentiable_inputs_declare_no_gradient():
    op = Scale()
    assert [op.declares_no_gradient(i) for i in range(4)] == [False, True, True, False]


def test_a_backend_takes_slots_and_defaults_from_the_onnx_signature():
    class Gemm(SlottedOperator):
        op_type = "Gemm"
        slots, attribute_defaults = onnx_signature("Gemm")

        def forward(self, inputs):
            return []

    op = Gemm({"transA": 1})
    assert op.attr("transA") == 1 and op.attr("alpha") == 1.0
    assert not op.declares_no_gradient(2)
