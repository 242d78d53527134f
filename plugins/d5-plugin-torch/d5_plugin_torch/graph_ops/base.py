"""What every operator translator shares: input lookup at translation time, dtypes and
the wrappers that build a node's function from one torch function."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
import torch

from d5core.api import UsageError

__all__ = [
    "Fn",
    "One",
    "Tensor",
    "Translation",
    "TranslatorBase",
    "Value",
    "fixed",
    "int_list",
    "onnx_dtype",
    "to_numpy",
    "to_torch",
    "unary_method",
    "unsigned_safe",
]

Tensor = torch.Tensor
#: A translated node: a function of its input tensors returning its output tensors.
Fn = Callable[..., Sequence[Tensor]]
#: A function of tensors returning one tensor (wrapped into an ``Fn``).
One = Callable[..., Tensor]
#: What an ``op_*`` method returns: the node's function and the input names it takes.
Translation = tuple[Fn, list[str]]
#: The value of an input a node needs as numbers (a shape, axes, pads): a function of
#: the input's tensor at run time (``None`` when absent) giving an array (or ``None``).
Value = Callable[[Tensor | None], np.ndarray | None]

_SIGN = -(1 << 63)
#: Unsigned types that torch stores but cannot compare, order or divide on the CPU.
_NARROW_UNSIGNED = tuple(getattr(torch, f"uint{n}") for n in (16, 32) if hasattr(torch, f"uint{n}"))
_UINT64 = getattr(torch, "uint64", None)


#: numpy-extension (ml_dtypes) element types torch has, by name: the torch type and the
#: integer type of the same width their bits travel as.
_BITS_TYPES: dict[str, tuple[str, Any, Any]] = {
    "bfloat16": ("bfloat16", np.int16, torch.int16),
    "float8_e4m3fn": ("float8_e4m3fn", np.uint8, torch.uint8),
    "float8_e5m2": ("float8_e5m2", np.uint8, torch.uint8),
    "float8_e4m3fnuz": ("float8_e4m3fnuz", np.uint8, torch.uint8),
    "float8_e5m2fnuz": ("float8_e5m2fnuz", np.uint8, torch.uint8),
}
_BY_TORCH = {
    getattr(torch, t): (name, bits_np, bits_torch)
    for name, (t, bits_np, bits_torch) in _BITS_TYPES.items()
    if hasattr(torch, t)
}


def to_torch(value: Any, device: torch.device | str = "cpu", *, copy: bool = False) -> Tensor:
    """``value`` (an array or array-like) as a tensor, keeping its shape (0-d included)
    and its element type, bfloat16 and float8 arrays from ml_dtypes included.

    :raises UsageError: for element types torch has no tensors of.
    """
    if isinstance(value, (list, tuple)) and any(isinstance(v, np.ndarray) for v in value):
        raise UsageError(
            "the torch executor runs tensors, not sequences of tensors; feed one array"
        )
    array = np.asarray(value)
    special = _BITS_TYPES.get(array.dtype.name)
    if special is not None and hasattr(torch, special[0]):
        bits = np.require(array.view(special[1]), requirements="C")
        return torch.as_tensor(bits.copy() if copy else bits, device=device).view(
            getattr(torch, special[0])
        )
    if array.dtype.kind not in "biufc":
        raise UsageError(
            f"the torch executor has no tensors of element type {array.dtype}; feed a numeric array"
        )
    array = np.require(array, requirements="C")
    return torch.tensor(array, device=device) if copy else torch.as_tensor(array, device=device)


def to_numpy(tensor: Tensor) -> np.ndarray:
    """A tensor as a numpy array, bfloat16 and float8 as their ml_dtypes types."""
    t = tensor.detach().cpu()
    special = _BY_TORCH.get(t.dtype)
    if special is None:
        return t.numpy()
    import ml_dtypes  # an onnx dependency; needed only for these types

    return t.view(special[2]).numpy().view(getattr(ml_dtypes, special[0]))


def fixed(value: Any) -> Value:
    """A :data:`Value` known at translation (an attribute's): ``value`` as an array."""
    array = None if value is None else np.asarray(value)
    return lambda _t: array


def int_list(value: np.ndarray | None) -> list[int] | None:
    """``value`` flattened into Python ints (``None`` stays ``None``)."""
    return None if value is None else [int(v) for v in np.asarray(value).reshape(-1)]


def onnx_dtype(code: int) -> torch.dtype:
    """The torch dtype of an ONNX ``TensorProto`` element type.

    :raises UsageError: for element types torch has no tensors of (strings, int4, ...).
    """
    special: dict[int, torch.dtype | None] = {
        onnx.TensorProto.BFLOAT16: torch.bfloat16,
        onnx.TensorProto.FLOAT8E4M3FN: getattr(torch, "float8_e4m3fn", None),
        onnx.TensorProto.FLOAT8E5M2: getattr(torch, "float8_e5m2", None),
        onnx.TensorProto.FLOAT8E4M3FNUZ: getattr(torch, "float8_e4m3fnuz", None),
        onnx.TensorProto.FLOAT8E5M2FNUZ: getattr(torch, "float8_e5m2fnuz", None),
    }
    if code in special:
        found = special[code]
        if found is None:
            raise UsageError(
                f"element type {onnx.TensorProto.DataType.Name(code)} is not supported"
            )
        return found
    try:
        np_type = onnx.helper.tensor_dtype_to_np_dtype(code)
        if np_type.kind not in "biufc":
            raise TypeError(np_type)
        return torch.from_numpy(np.empty(0, dtype=np_type)).dtype
    except (KeyError, TypeError, ValueError):
        name = (
            onnx.TensorProto.DataType.Name(code)
            if code in onnx.TensorProto.DataType.values()
            else str(code)
        )
        raise UsageError(
            f"element type {name} is not supported by the torch executor; use a numeric type"
        ) from None


def unsigned_safe(fn: One) -> One:
    """``fn`` of tensors, also for uint16, uint32 (computed in int64 and, when ``fn``
    keeps the type, cast back) and uint64 (on its int64 bits with the sign bit flipped,
    which orders them as unsigned values: for comparisons, max and min)."""

    def run(*xs: Tensor) -> Tensor:
        dtype = xs[0].dtype
        if dtype in _NARROW_UNSIGNED:
            out = fn(*(x.to(torch.int64) for x in xs))
            return out if out.dtype == torch.bool else out.to(dtype)
        if dtype == _UINT64:
            out = fn(*(x.view(torch.int64) ^ _SIGN for x in xs))
            return out if out.dtype == torch.bool else (out ^ _SIGN).view(dtype)
        return fn(*xs)

    return run


def unary_method(fn: One) -> Callable[[Any, onnx.NodeProto, dict[str, Any]], Translation]:
    """An ``op_*`` method applying ``fn`` to the node's one input."""

    def method(self: Any, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        return (lambda x: (fn(x),)), [node.input[0]]

    method.__doc__ = f"One input, through ``{getattr(fn, '__name__', 'fn')}``."
    return method


class TranslatorBase:
    """The state and helpers the ``op_*`` translators of every group use.

    :param executor: the :class:`~d5_plugin_torch.executor.TorchExecutor` being built,
        whose ``_constants``, ``_graph`` and ``_trainable_set`` say which inputs are
        known at translation.
    :param training: whether the translation is for the training pass.
    """

    def __init__(self, executor: Any, training: bool) -> None:
        self.ex, self.training, self.opset = executor, training, int(executor._graph.opset)

    def known(self, node: onnx.NodeProto, index: int) -> tuple[bool, np.ndarray | None]:
        """Whether input ``index`` is known at translation (absent, a constant or a
        non-trainable initializer), and its value if so."""
        if index >= len(node.input) or not node.input[index]:
            return True, None
        name = node.input[index]
        if name in self.ex._constants:
            return True, self.ex._constants[name]
        param = self.ex._graph.parameters.get(name)
        if param is not None and name not in self.ex._trainable_set:
            return True, param
        return False, None

    def static(self, node: onnx.NodeProto, index: int) -> np.ndarray | None:
        """Input ``index`` as an array at translation; ``None`` when absent.

        :raises UsageError: when the input is computed or fed at run time.
        """
        found, value = self.known(node, index)
        if not found:
            raise UsageError(
                f"node {node.name!r} ({node.op_type}): input {index} "
                f"({node.input[index]!r}) must be a constant for the torch executor"
            )
        return value

    def value(self, node: onnx.NodeProto, index: int) -> Value:
        """Input ``index`` as numbers: resolved now when it is known at translation,
        else read from its tensor at run time (a shape computed by the graph, say)."""
        found, value = self.known(node, index)
        if found:
            return lambda _t: value
        return lambda t: None if t is None else to_numpy(t)

    def _unary(self, node: onnx.NodeProto, fn: One) -> Translation:
        return (lambda x: (fn(x),)), [node.input[0]]

    def _binary(self, node: onnx.NodeProto, fn: One) -> Translation:
        return (lambda x, y: (fn(x, y),)), list(node.input[:2])
