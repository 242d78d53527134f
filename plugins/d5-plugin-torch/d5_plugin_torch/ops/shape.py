"""Shape operators: ``Reshape``, ``Flatten``, ``Transpose``, ``Concat``, ``Squeeze``,
``Unsqueeze``.

Shape and axes inputs are integers that ONNX passes as tensors; they are read into
Python values when the kernel is built, so the timed call is the torch view or copy
alone. Like torch's own, the results of ``Reshape``, ``Flatten``, ``Transpose``,
``Squeeze`` and ``Unsqueeze`` are views where torch can make one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import torch

from d5_plugin_torch.ops._base import Kernel, Signature, Slot, TorchOperator

__all__ = ["Concat", "Flatten", "Reshape", "Squeeze", "Transpose", "Unsqueeze"]


def _integers(op: TorchOperator, name: str, value: np.ndarray) -> list[int]:
    array = np.asarray(value)
    if not np.issubdtype(array.dtype, np.integer) or array.ndim > 1:
        raise op.fail(f"input {name} must be a 1-D integer tensor, got {array.dtype} {array.shape}")
    return [int(v) for v in array.reshape(-1)]


def _axes(op: TorchOperator, axes: list[int], rank: int, name: str = "axes") -> list[int]:
    """``axes`` made non-negative for a tensor of ``rank``; each at most once."""
    out = []
    for axis in axes:
        if not -rank <= axis < rank:
            raise op.fail(f"{name} {axes} has {axis}, out of range for rank {rank}")
        out.append(axis % rank)
    if len(set(out)) != len(out):
        raise op.fail(f"{name} {axes} names an axis twice")
    return out


class Reshape(TorchOperator):
    """ONNX ``Reshape`` (0 copies the input's dimension unless ``allowzero``; -1 is
    inferred): ``torch.reshape``."""

    op_type = "Reshape"
    slots = (Slot("data"), Slot("shape", kind="static", integer=True))
    attribute_defaults: ClassVar[Mapping[str, Any]] = {"allowzero": 0}

    def configure(self) -> None:
        self.allowzero = bool(int(self.attr("allowzero")))

    def _target(self, sig: Signature) -> tuple[int, ...] | None:
        self.require_rank(sig, 1, (1,), what="(the new shape)")
        data, shape = sig.shapes[0], sig.value("shape")
        if not sig.values_known or shape is None or data is None:
            return None
        wanted = _integers(self, "shape", shape)
        target = [
            data[i] if d == 0 and not self.allowzero and i < len(data) else d
            for i, d in enumerate(wanted)
        ]
        if not self.allowzero and any(d == 0 for i, d in enumerate(wanted) if i >= len(data)):
            raise self.fail(f"shape {wanted} copies (0) an axis that data {data} lacks")
        if any(d < -1 for d in target) or target.count(-1) > 1:
            raise self.fail(f"shape {wanted} may hold one -1 and no other negative value")
        if self.allowzero and -1 in target and 0 in target:
            raise self.fail(f"shape {wanted} holds both 0 and -1, impossible with allowzero=1")
        size, known = math.prod(data), math.prod(d for d in target if d != -1)
        if -1 in target:
            if known == 0 or size % known:
                raise self.fail(f"data of shape {data} cannot be reshaped to {wanted}")
            target[target.index(-1)] = size // known
        elif known != size:
            raise self.fail(
                f"data of shape {data} ({size} elements) cannot be reshaped to {wanted}"
            )
        return tuple(target)

    def check(self, sig: Signature) -> None:
        self._target(sig)

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        target = self._target(sig)
        assert target is not None
        reshape = torch.reshape
        return lambda x: (reshape(x, target),)


class Flatten(TorchOperator):
    """ONNX ``Flatten``: a 2-D result split at ``axis``, by ``torch.reshape``."""

    op_type = "Flatten"
    slots = (Slot("input"),)
    attribute_defaults: ClassVar[Mapping[str, Any]] = {"axis": 1}

    def _target(self, sig: Signature) -> tuple[int, int]:
        shape = sig.shapes[0]
        assert shape is not None
        axis = int(self.attr("axis"))
        if not -len(shape) <= axis <= len(shape):
            raise self.fail(f"axis {axis} is out of range for input of shape {shape}")
        if axis < 0:
            axis += len(shape)
        return math.prod(shape[:axis]), math.prod(shape[axis:])

    def check(self, sig: Signature) -> None:
        self._target(sig)

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        target = self._target(sig)
        reshape = torch.reshape
        return lambda x: (reshape(x, target),)


class Transpose(TorchOperator):
    """ONNX ``Transpose`` (default: reverse the axes): ``torch.permute``."""

    op_type = "Transpose"
    slots = (Slot("data"),)
    attribute_defaults: ClassVar[Mapping[str, Any]] = {"perm": None}

    def _perm(self, sig: Signature) -> tuple[int, ...]:
        shape = sig.shapes[0]
        assert shape is not None
        perm = self.ints("perm")
        if perm is None:
            return tuple(reversed(range(len(shape))))
        if sorted(perm) != list(range(len(shape))):
            raise self.fail(f"perm {perm} is not a permutation of the {len(shape)} axes of {shape}")
        return tuple(perm)

    def check(self, sig: Signature) -> None:
        self._perm(sig)

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        perm = self._perm(sig)
        permute = torch.permute
        return lambda x: (permute(x, perm),)


class Concat(TorchOperator):
    """ONNX ``Concat`` along ``axis``: ``torch.cat``."""

    op_type = "Concat"
    slots = (Slot("inputs", variadic=True),)
    attribute_defaults: ClassVar[Mapping[str, Any]] = {"axis": None}

    def configure(self) -> None:
        if self.attr("axis") is None:
            raise self.fail("attribute axis is required")
        self.axis = int(self.attr("axis"))

    def check(self, sig: Signature) -> None:
        shapes = [s for s in sig.shapes if s is not None]
        first = shapes[0]
        if not first:
            raise self.fail("inputs must have rank 1 or more, got a scalar")
        (axis,) = _axes(self, [self.axis], len(first), "axis")
        for i, shape in enumerate(shapes[1:], start=1):
            if len(shape) != len(first) or any(
                a != b for j, (a, b) in enumerate(zip(shape, first, strict=True)) if j != axis
            ):
                raise self.fail(
                    f"input {i} of shape {shape} does not match input 0 of shape {first} "
                    f"off axis {self.axis}"
                )

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        cat, axis = torch.cat, self.axis
        return lambda *xs: (cat(xs, axis),)


class Squeeze(TorchOperator):
    """ONNX ``Squeeze`` (opset 13: ``axes`` is an input; without it every axis of size 1
    goes): ``torch.squeeze``."""

    op_type = "Squeeze"
    slots = (Slot("data"), Slot("axes", kind="static", optional=True, integer=True))

    def _dims(self, sig: Signature) -> tuple[int, ...] | None:
        shape = sig.shapes[0]
        assert shape is not None
        given = sig.value("axes")
        if given is not None and not sig.values_known:
            return None
        if given is None:
            return tuple(i for i, d in enumerate(shape) if d == 1)
        wanted = _integers(self, "axes", given)
        dims = _axes(self, wanted, len(shape))
        if any(shape[d] != 1 for d in dims):
            raise self.fail(f"axes {wanted} of data {shape} are not all of size 1")
        return tuple(sorted(dims))

    def check(self, sig: Signature) -> None:
        self._dims(sig)

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        dims = self._dims(sig)
        assert dims is not None
        squeeze = torch.squeeze
        return lambda x: (squeeze(x, dims),)


class Unsqueeze(TorchOperator):
    """ONNX ``Unsqueeze`` (opset 13: ``axes``, a required input, counts in the output's
    rank): ``torch.unsqueeze`` per axis."""

    op_type = "Unsqueeze"
    slots = (Slot("data"), Slot("axes", kind="static", optional=True, integer=True))

    def _dims(self, sig: Signature) -> tuple[int, ...] | None:
        shape = sig.shapes[0]
        assert shape is not None
        given = sig.value("axes")
        if given is not None and not sig.values_known:
            return None
        if given is None:
            raise self.fail("input axes is required")
        wanted = _integers(self, "axes", given)
        return tuple(sorted(_axes(self, wanted, len(shape) + len(wanted))))

    def check(self, sig: Signature) -> None:
        self._dims(sig)

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        dims = self._dims(sig)
        assert dims is not None
        unsqueeze = torch.unsqueeze

        def kernel(x: torch.Tensor) -> tuple[torch.Tensor]:
            for dim in dims:
                x = unsqueeze(x, dim)
            return (x,)

        return kernel
