"""What every torch operator shares: input slots, conversion, and the timed callables.

An operator declares its inputs as :class:`Slot` s and builds a *kernel*: a function of
torch tensors that makes only native torch calls. Everything else (checking shapes and
dtypes, reading integer inputs such as a ``Reshape`` shape into Python values, moving
arrays to the device, building the autograd graph) happens when a callable is prepared,
outside the region d5 times. :meth:`TorchOperator.forward` and
:meth:`TorchOperator.backward` go through the same prepared callables, so what is
validated is exactly what is timed.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from d5core.api import UsageError
from d5core.onnx import BackendOperator, InputSlot
from d5core.onnx import Signature as PlanSignature

__all__ = [
    "FLOAT_DTYPES",
    "Kernel",
    "Signature",
    "Slot",
    "TorchOperator",
    "resolve_device",
    "torch_dtype_of",
]

#: Element types of floating inputs, by numpy name.
FLOAT_DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "float64": torch.float64}

#: A function of torch tensors that returns the operator's outputs.
Kernel = Callable[..., tuple[torch.Tensor, ...]]

#: Errors torch raises for inputs it rejects; they become one-line ``UsageError`` s.
_TORCH_ERRORS = (RuntimeError, IndexError, ValueError)


#: One input of an operator, as ONNX names it (:class:`d5core.api.InputSlot`).
Slot = InputSlot


@dataclass(frozen=True, kw_only=True)
class Signature(PlanSignature):
    """The inputs a kernel is built for, with torch's float type and the device."""

    #: The floating element type shared by the float inputs.
    dtype: torch.dtype
    device: torch.device


#: Torch element types by numpy name, for inputs and outputs that are not floating.
_TORCH_DTYPES: dict[str, torch.dtype] = {
    "bool": torch.bool,
    "uint8": torch.uint8,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint16": torch.uint16,
    "uint32": torch.uint32,
    "uint64": torch.uint64,
    "float16": torch.float16,
    **FLOAT_DTYPES,
}


def torch_dtype_of(dtype: Any) -> torch.dtype:
    """The torch element type of a numpy dtype (or its name); a one-line ``UsageError``
    for one torch has no counterpart of (strings, complex numbers)."""
    name = str(np.dtype(dtype))
    try:
        return _TORCH_DTYPES[name]
    except KeyError:
        known = ", ".join(_TORCH_DTYPES)
        raise UsageError(f"torch: dtype {name} is not supported here; use one of {known}") from None


def resolve_device(device: str | torch.device) -> torch.device:
    """The torch device for ``device``; a one-line ``UsageError`` if it cannot be used."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise UsageError(f"torch: {device!r} is not a device name ({_one_line(exc)})") from exc
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(
                f"torch: device {device!r} asked for, but CUDA is not available; use 'cpu'"
            )
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
    elif dev.type != "cpu":
        raise UsageError(f"torch: device {device!r} is not supported; use 'cpu' or 'cuda'")
    return dev


def _one_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def _fmt(shape: Sequence[int] | None) -> str:
    return "absent" if shape is None else "(" + ", ".join(str(d) for d in shape) + ")"


@dataclass
class _Bound:
    """A kernel with its tensors on the device, ready to call."""

    kernel: Kernel
    args: tuple[torch.Tensor | None, ...]
    #: Operator input positions whose gradients are computed, in order.
    grad_inputs: tuple[int, ...]
    #: The tensors (leaves of the graph) those gradients are taken with respect to.
    grad_leaves: tuple[torch.Tensor, ...]
    shapes: tuple[tuple[int, ...] | None, ...]


class TorchOperator(BackendOperator):
    """An ONNX operator run by PyTorch on one device.

    Subclasses set :attr:`slots` and :attr:`attribute_defaults`, check their attributes in
    :meth:`configure`, check input shapes in :meth:`check`, and return the native torch
    computation from :meth:`build`.
    """

    float_dtypes = FLOAT_DTYPES
    backend = "torch"

    def __init__(
        self, attributes: Mapping[str, Any] | None = None, *, device: str | torch.device = "cpu"
    ) -> None:
        super().__init__(attributes)
        self.torch_device = resolve_device(device)
        self.device = str(self.torch_device)
        self.configure()

    # -- what subclasses provide --------------------------------------------

    @abstractmethod
    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        """The native torch computation for inputs matching ``sig``.

        The kernel takes one tensor (or ``None`` when absent) per input that is not
        ``static`` (floating, index and boolean tensors), in input order, and returns the
        outputs as a tuple. ``for_grad`` is true when the kernel will be differentiated.
        """

    # -- helpers for subclasses ---------------------------------------------

    def format_shape(self, shape: Sequence[int]) -> str:
        """Shapes in messages read ``(2, 3)``, ``(5)`` or ``()``."""
        return _fmt(shape)

    # -- Operator -------------------------------------------------------------

    @property
    def differentiable(self) -> bool:
        """Whether there is a backward to check: false for an operator that declares no
        gradient at all (:attr:`no_gradient`, such as ``ConstantOfShape``, whose only
        input is a shape)."""
        return not self.no_gradient

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run the forward pass on numpy arrays (converting in and out)."""
        outputs = self.prepare_forward(inputs)()
        return [_to_numpy(t) for t in outputs]

    def gradients(
        self, grad_outputs: Sequence[np.ndarray | None], inputs: Sequence[np.ndarray]
    ) -> tuple[tuple[int, ...], list[np.ndarray]]:
        """The gradients of the differentiable inputs through autograd (the graph is
        rebuilt from ``inputs``), with their positions."""
        run, positions = self._prepare_backward(grad_outputs, inputs)
        return positions, [_to_numpy(grad) for grad in run()]

    def prepare_forward(self, inputs: Sequence[np.ndarray]) -> Callable[[], Any]:
        """Convert ``inputs`` to tensors on the device once; return the timed callable.

        The callable makes only the kernel's torch calls, then synchronizes when the device
        is a GPU, and returns the output tensors. No tensor it holds requires a gradient,
        so autograd records nothing: the effect of ``torch.no_grad()`` without the cost of
        entering it on every call (about 1 µs, as long as a small ``Relu`` itself).
        """
        bound = self._bind(inputs, for_grad=False)
        kernel, args, translate = bound.kernel, bound.args, self.rejection(bound.shapes, _one_line)
        assert not any(t is not None and t.requires_grad for t in args)
        if self.torch_device.type == "cuda":
            sync, device = torch.cuda.synchronize, self.torch_device

            def run_cuda() -> tuple[torch.Tensor, ...]:
                try:
                    out = kernel(*args)
                    sync(device)
                except _TORCH_ERRORS as exc:
                    raise translate(exc) from exc
                return out

            return run_cuda

        def run() -> tuple[torch.Tensor, ...]:
            try:
                return kernel(*args)
            except _TORCH_ERRORS as exc:
                raise translate(exc) from exc

        return run

    def prepare_backward(
        self, grad_outputs: Sequence[np.ndarray | None], inputs: Sequence[np.ndarray]
    ) -> Callable[[], Any]:
        """Run the forward pass with autograd once; return a callable that runs only the
        backward pass (``torch.autograd.grad`` with ``retain_graph=True``), synchronizing
        on a GPU. It returns the gradients of the differentiable inputs, in input order.
        """
        return self._prepare_backward(grad_outputs, inputs)[0]

    # -- machinery --------------------------------------------------------------

    def _prepare_backward(
        self, grad_outputs: Sequence[np.ndarray | None], inputs: Sequence[np.ndarray]
    ) -> tuple[Callable[[], tuple[torch.Tensor, ...]], tuple[int, ...]]:
        bound = self._bind(inputs, for_grad=True)
        translate = self.rejection(bound.shapes, _one_line)
        try:
            with torch.enable_grad():
                outputs = bound.kernel(*bound.args)
        except _TORCH_ERRORS as exc:
            raise translate(exc) from exc
        self.check_output_gradients(len(grad_outputs), len(outputs))
        roots: list[torch.Tensor] = []
        seeds: list[torch.Tensor] = []
        for i, (out, given) in enumerate(zip(outputs, grad_outputs, strict=False)):
            if given is None or not out.requires_grad:
                continue
            seed = np.asarray(given)
            if tuple(seed.shape) != tuple(out.shape):
                raise self.fail(
                    f"gradient of output {i} has shape {_fmt(seed.shape)}, "
                    f"but the output has shape {_fmt(tuple(out.shape))}"
                )
            roots.append(out)
            seeds.append(self._tensor(seed, out.dtype))
        leaves = bound.grad_leaves
        positions = bound.grad_inputs
        if not roots or not leaves:
            zeros = tuple(torch.zeros_like(leaf) for leaf in leaves)
            return (lambda: zeros), positions
        roots_t, seeds_t = tuple(roots), tuple(seeds)
        grad = torch.autograd.grad

        def run() -> tuple[torch.Tensor, ...]:
            return tuple(grad(roots_t, leaves, seeds_t, retain_graph=True, materialize_grads=True))

        if self.torch_device.type == "cuda":
            sync, device = torch.cuda.synchronize, self.torch_device

            def run_cuda() -> tuple[torch.Tensor, ...]:
                grads = grad(roots_t, leaves, seeds_t, retain_graph=True, materialize_grads=True)
                sync(device)
                return tuple(grads)

            return run_cuda, positions
        return run, positions

    def _bind(self, inputs: Sequence[np.ndarray | None], *, for_grad: bool) -> _Bound:
        arrays = [None if a is None else np.asarray(a) for a in inputs]
        sig: Signature = self._signature(arrays, values_known=True)
        kernel = self.build(sig, for_grad=for_grad)
        args: list[torch.Tensor | None] = []
        grad_inputs: list[int] = []
        leaves: list[torch.Tensor] = []
        for pos, (slot, array) in enumerate(zip(sig.slots, sig.arrays, strict=True)):
            if slot.kind == "static":
                continue
            if array is None:
                args.append(None)
                continue
            tensor = self._tensor(array, self._slot_dtype(slot, array, sig))
            if for_grad and slot.kind == "float" and not self.declares_no_gradient(pos):
                tensor.requires_grad_(True)
                grad_inputs.append(pos)
                leaves.append(tensor)
            args.append(tensor)
        return _Bound(kernel, tuple(args), tuple(grad_inputs), tuple(leaves), sig.shapes)

    @staticmethod
    def _slot_dtype(slot: Slot, array: np.ndarray, sig: Signature) -> torch.dtype:
        """The element type an input takes on the device: the shared float type for a
        ``float`` slot, int64 for an ``index`` slot, and the array's own type (a bool
        condition, an integer exponent) for a slot of any other kind."""
        if slot.kind == "float":
            return sig.dtype
        if slot.kind == "index":
            return torch.int64
        return torch_dtype_of(array.dtype)

    def _tensor(self, array: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
        """A copy of ``array`` on the operator's device (never sharing numpy's memory)."""
        return torch.tensor(np.asarray(array), dtype=dtype, device=self.torch_device)

    def signature(
        self,
        arrays: tuple[Any, ...],
        slots: tuple[InputSlot, ...],
        dtype: str | None,
        *,
        values_known: bool,
    ) -> Signature:
        """The signature with torch's float type and the operator's device."""
        return Signature(
            arrays=arrays,
            slots=slots,
            dtype=FLOAT_DTYPES[dtype] if dtype is not None else torch.float32,
            device=self.torch_device,
            values_known=values_known,
        )


def _to_numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().cpu().numpy()
