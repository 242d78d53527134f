"""``torch.optim`` behind d5's :class:`~d5core.api.Optimizer` interface.

Each class wraps one ``torch.optim`` optimizer, is registered as ``torch-<name>`` in
``d5.optimizers`` and takes the same options (and defaults) as the numpy reference of the
same name, whose updates it reproduces. Two ways to use one:

- **native** (``native = "torch"``): :meth:`TorchOptimizer.bind` takes a
  :class:`~d5_plugin_torch.executor.TorchExecutor`'s live trainable tensors; then
  :meth:`TorchOptimizer.native_step` takes the gradients autograd produced (a mapping by
  name, or a sequence in the executor's ``trainable`` order) and updates the tensors in
  place. No numpy conversion happens.
- **numpy**: :meth:`TorchOptimizer.step` copies numpy parameters and gradients into
  tensors it owns, steps, and writes the parameters back in place. Any executor works.

Each parameter is its own ``torch.optim`` parameter group, so the learning rate set on
:attr:`lr` is applied to every group before each step, and a state dict from either way of
use loads into the other.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np
import torch

from d5core.api import UsageError
from d5core.onnx import NativeOptimizer

__all__ = [
    "TorchAdagrad",
    "TorchAdam",
    "TorchAdamW",
    "TorchMomentum",
    "TorchNesterov",
    "TorchOptimizer",
    "TorchRMSprop",
    "TorchSGD",
]

Tensor = torch.Tensor


def _executor_parameters(executor: Any) -> dict[str, Tensor]:
    """The executor's live trainable tensors by name, in its ``trainable`` order."""
    accessor = getattr(executor, "native_parameters", None)
    if callable(accessor):
        return dict(accessor())
    params = getattr(executor, "_params", None)
    if not isinstance(params, Mapping):
        raise UsageError(
            f"{type(executor).__name__} holds no torch parameters; torch optimizers bind "
            "to the torch executor only (use step() with numpy arrays otherwise)"
        )
    graph = getattr(executor, "_graph", None)
    names = list(getattr(graph, "trainable", None) or executor.network.trainable)
    return {n: params[n] for n in names if n in params and params[n].is_floating_point()}


class TorchOptimizer(NativeOptimizer):
    """A ``torch.optim`` optimizer under d5's interface; subclasses pick the class."""

    native: ClassVar[str | None] = "torch"
    #: The wrapped ``torch.optim`` class, built as ``optim_class(params, lr=..., **options)``
    #: (a factory of that shape: the base class ``torch.optim.Optimizer`` takes no ``lr``).
    optim_class: ClassVar[Callable[..., torch.optim.Optimizer]] = torch.optim.SGD

    def __init__(self, lr: float = 0.01, **hyper: float) -> None:
        super().__init__(lr, **hyper)
        self._tensors: dict[str, Tensor] = {}
        self._optim: torch.optim.Optimizer | None = None
        self._bound = False
        self._pending: dict[str, Any] | None = None

    def optim_options(self) -> dict[str, Any]:
        """Keyword arguments of :attr:`optim_class` besides ``lr``, from :attr:`hyper`."""
        return {}

    # -- native use ------------------------------------------------------------

    def bind(self, executor: object) -> None:
        """Update ``executor``'s trainable tensors from now on (state starts afresh)."""
        self._tensors = _executor_parameters(executor)
        self._optim, self._bound = None, True

    def native_step(self, native_grads: object) -> None:
        """Step the bound tensors with autograd's gradients (``None`` counts as zeros)."""
        if not self._bound:
            raise UsageError(f"optimizer {self.name!r}: call bind(executor) before native_step")
        tensors = self._tensors
        names, grads = self.native_gradients(native_grads, tensors)
        for name, grad in zip(names, grads, strict=True):
            t = tensors[name]
            if grad is None:
                grad = torch.zeros_like(t)
            elif grad.requires_grad:  # autograd's own gradients need no detaching (µs each)
                grad = grad.detach()
            t.grad = grad
        self._apply()

    # -- numpy use -------------------------------------------------------------

    def step(self, params: Mapping[str, np.ndarray], grads: Mapping[str, np.ndarray]) -> None:
        """Update numpy ``params`` in place: copied into owned tensors, stepped, copied back."""
        if self._bound:
            raise UsageError(f"optimizer {self.name!r} is bound to an executor; call native_step")
        for name, p, grad in self.numpy_gradients(params, grads):
            t = self._tensors.get(name)
            if t is None:
                t = self._tensors[name] = torch.tensor(np.ascontiguousarray(p))
                if self._optim is not None:
                    self._optim.add_param_group({"params": [t]})
            else:
                with torch.no_grad():
                    t.copy_(torch.from_numpy(np.ascontiguousarray(p)))
            t.grad = torch.as_tensor(np.asarray(grad), dtype=t.dtype)
        self._apply()
        for name in grads:
            np.copyto(params[name], self._tensors[name].numpy())

    # -- shared ----------------------------------------------------------------

    def _apply(self) -> None:
        if self._optim is None:
            # One group for all parameters: torch.optim loops over groups in Python, so a
            # group per parameter costs tens of microseconds a step on a small model.
            params = list(self._tensors.values())
            self._optim = self.optim_class(params, lr=self.lr, **self.optim_options())
            if self._pending is not None:
                self._load_pending()
        for group in self._optim.param_groups:
            if group["lr"] != self.lr:
                group["lr"] = self.lr
        # torch.optim's step() runs without autograd itself (it is not differentiable
        # here): no torch.no_grad() around it, which cost microseconds every step.
        self._optim.step()
        for t in self._tensors.values():
            t.grad = None

    def _load_pending(self) -> None:
        assert self._optim is not None and self._pending is not None
        pending, self._pending = self._pending, None
        if list(pending["names"]) != list(self._tensors):
            raise UsageError(
                f"optimizer {self.name!r}: the saved state is for parameters "
                f"{list(pending['names'])}, not {list(self._tensors)}"
            )
        self._optim.load_state_dict(pending["optim"])

    def state_dict(self) -> dict[str, object]:
        """``lr``, ``hyper``, the parameter names and ``torch.optim``'s own state dict."""
        d: dict[str, object] = {"name": self.name, "lr": self.lr, "hyper": dict(self.hyper)}
        if self._optim is not None:
            d["names"] = list(self._tensors)
            d["optim"] = copy.deepcopy(self._optim.state_dict())
        elif self._pending is not None:
            d.update(copy.deepcopy(self._pending))
        return d

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        """Resume from :meth:`state_dict`; the state applies once the same parameters
        (same names, same order) take their next step."""
        super().load_state_dict({k: v for k, v in state.items() if k in ("name", "lr", "hyper")})
        self._pending = (
            copy.deepcopy({"names": state["names"], "optim": state["optim"]})
            if "optim" in state
            else None
        )
        if self._optim is not None:
            self._optim = None
            if self._pending is None:
                return
            params = list(self._tensors.values())
            self._optim = self.optim_class(params, lr=self.lr, **self.optim_options())
            self._load_pending()

    def reset(self) -> None:
        """Forget all state; a bound optimizer stays bound to the same tensors."""
        super().reset()
        self._optim, self._pending = None, None
        if not self._bound:
            self._tensors = {}


class TorchSGD(TorchOptimizer):
    """``torch.optim.SGD``: ``p -= lr * g``."""

    name: ClassVar[str] = "torch-sgd"


class TorchMomentum(TorchOptimizer):
    """``torch.optim.SGD(momentum=...)``: ``v = m v + g``; ``p -= lr v``."""

    name: ClassVar[str] = "torch-momentum"
    defaults: ClassVar[dict[str, float]] = {"momentum": 0.9}

    def optim_options(self) -> dict[str, Any]:
        return {"momentum": self.hyper["momentum"]}


class TorchNesterov(TorchOptimizer):
    """``torch.optim.SGD(momentum=..., nesterov=True)``."""

    name: ClassVar[str] = "torch-nesterov"
    defaults: ClassVar[dict[str, float]] = {"momentum": 0.9}

    def optim_options(self) -> dict[str, Any]:
        return {"momentum": self.hyper["momentum"], "nesterov": True}


class TorchAdam(TorchOptimizer):
    """``torch.optim.Adam``."""

    name: ClassVar[str] = "torch-adam"
    optim_class: ClassVar[Callable[..., torch.optim.Optimizer]] = torch.optim.Adam
    defaults: ClassVar[dict[str, float]] = {"beta1": 0.9, "beta2": 0.999, "eps": 1e-8}

    def __init__(self, lr: float = 1e-3, **hyper: float) -> None:
        super().__init__(lr, **hyper)

    def optim_options(self) -> dict[str, Any]:
        h = self.hyper
        return {"betas": (h["beta1"], h["beta2"]), "eps": h["eps"]}


class TorchAdamW(TorchAdam):
    """``torch.optim.AdamW`` (decoupled weight decay)."""

    name: ClassVar[str] = "torch-adamw"
    optim_class: ClassVar[Callable[..., torch.optim.Optimizer]] = torch.optim.AdamW
    defaults: ClassVar[dict[str, float]] = {**TorchAdam.defaults, "weight_decay": 0.01}

    def optim_options(self) -> dict[str, Any]:
        return {**super().optim_options(), "weight_decay": self.hyper["weight_decay"]}


class TorchAdagrad(TorchOptimizer):
    """``torch.optim.Adagrad``."""

    name: ClassVar[str] = "torch-adagrad"
    optim_class: ClassVar[Callable[..., torch.optim.Optimizer]] = torch.optim.Adagrad
    defaults: ClassVar[dict[str, float]] = {"eps": 1e-10, "initial_accumulator": 0.0}

    def optim_options(self) -> dict[str, Any]:
        h = self.hyper
        return {"eps": h["eps"], "initial_accumulator_value": h["initial_accumulator"]}


class TorchRMSprop(TorchOptimizer):
    """``torch.optim.RMSprop``."""

    name: ClassVar[str] = "torch-rmsprop"
    optim_class: ClassVar[Callable[..., torch.optim.Optimizer]] = torch.optim.RMSprop
    defaults: ClassVar[dict[str, float]] = {
        "alpha": 0.99,
        "eps": 1e-8,
        "momentum": 0.0,
        "centered": False,
    }

    def optim_options(self) -> dict[str, Any]:
        h = self.hyper
        return {
            "alpha": h["alpha"],
            "eps": h["eps"],
            "momentum": h["momentum"],
            "centered": bool(h["centered"]),
        }
