"""MXNet's optimizers (``mx.optimizer``) behind d5's :class:`~d5core.api.Optimizer`.

Each class is registered as ``mx-<name>`` in ``d5.optimizers``, takes the options (and
defaults) of the numpy reference optimizer ``<name>`` and runs MXNet's own optimizer,
configured so that it follows the reference (PyTorch's formulation; docs/optimizers.md).
MXNet 1.9.1 has no AdamW, so there is no ``mx-adamw``. Where MXNet's rule differs, this
is the mapping (every optimizer runs with ``wd=0``, ``rescale_grad=1`` and no clipping):

- ``mx-sgd``: ``mx.optimizer.SGD`` (``sgd_update``), the same rule.
- ``mx-momentum``: ``SGD(momentum=m)`` (``sgd_mom_update``) folds the learning rate into
  its state (``u = m u - lr g``; ``p += u``), so ``u = -lr v`` with the reference's
  velocity ``v``; when the learning rate changes, ``u`` is first rescaled by
  ``new_lr / old_lr`` (one ``mx.nd`` multiply), which keeps ``u = -lr v`` exactly.
- ``mx-nesterov``: ``NAG`` (``nag_mom_update``) folds the learning rate in the same way
  (``u = m u - lr g``; ``p += m u - lr g``): with ``u = -lr v`` that is the reference's
  ``p -= lr (g + m v)``, rescaled as ``mx-momentum``'s.
- ``mx-adam``: ``Adam`` scales the learning rate by ``sqrt(1-b2^t) / (1-b1^t)`` and puts
  ``eps`` beside the *uncorrected* root, which equals the reference's
  ``eps`` beside the corrected root when MXNet's ``epsilon`` is ``eps * sqrt(1-b2^t)``:
  set before every step.
- ``mx-adagrad``: ``AdaGrad`` starts its sum at zero and puts ``eps`` *inside* the root
  (``g / sqrt(s + eps')``). The sum starts at ``initial_accumulator`` here (state this
  class creates), and ``eps' = eps**2``: the same denominator as ``sqrt(s) + eps`` where
  ``s`` is far below or far above ``eps**2``; in between (``s`` near ``eps**2``) the
  two differ by at most 29%. With the default ``eps = 1e-10`` that never happens to a
  gradient that is not zero to 10 digits.
- ``mx-rmsprop``, uncentered: MXNet's ``RMSProp`` puts ``eps`` inside the root, which
  moves a step by ``eps / sqrt(s)`` of itself (1e-5 for a gradient of 0.01 with the
  default ``eps``: over the 1e-6 asked). Uncentered RMSprop without momentum is Adam with
  ``beta1 = 0`` and no bias correction, so it runs ``mx.optimizer.Adam(beta1=0,
  beta2=alpha, epsilon=eps)`` with its learning rate divided by ``sqrt(1-alpha^t)`` each
  step (Adam multiplies by it): the reference's rule exactly. MXNet has no uncentered
  RMSprop with momentum: ``momentum > 0`` needs ``centered=1``, a :class:`UsageError`
  says so.
- ``mx-rmsprop``, centered: ``RMSProp(centered=True)`` (``rmspropalex_update``) with
  ``gamma1 = alpha``, ``gamma2 = momentum`` (the learning rate folded into its ``delta``
  and rescaled as ``mx-momentum``'s) and ``epsilon = eps**2`` inside the root. The
  reference's ``sqrt(s - a²) + eps`` has no exact MXNet form: the two agree exactly at
  ``eps = 0`` and otherwise differ by about ``eps / sqrt(s - a²)`` of a step.

MXNet keeps ``lr``, ``momentum``, the betas and ``epsilon`` of its fused update
operators as float32, so a float64 step differs from the reference's by about 1e-8 of
the update (within the 1e-6 asked of it, not bit for bit).

A step with ``lr == 0`` moves no parameter but advances the state in the reference;
where MXNet folds the learning rate into its state (momentum, centered RMSprop), that
step runs MXNet's update on a scratch copy of the weight, at the state's scale.

Two ways to use one:

- **native** (``native = "mxnet"``): :meth:`MXOptimizer.bind` takes the executor's live
  ``NDArray``\\ s (``executor.native_parameters()``); :meth:`MXOptimizer.native_step`
  takes their gradients (a mapping by name, or a sequence in trainable order) and
  updates them in place; nothing waits for MXNet's engine.
- **numpy**: :meth:`MXOptimizer.step` copies numpy parameters and gradients into
  ``NDArray``\\ s it owns, steps, and writes the parameters back in place.

:meth:`~MXOptimizer.state_dict` has the numpy reference's layout (``steps``, and
``state`` by parameter then ``velocity``, ``exp_avg``, ``exp_avg_sq``, ``sum``,
``square_avg``, ``grad_avg``, ``momentum_buffer``), so a state taken either way loads
into the other and compares with the reference's directly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from d5_plugin_mxnet._mx import mxnet
from d5core.api import UsageError
from d5core.onnx import NativeOptimizer

__all__ = [
    "MXSGD",
    "MXAdagrad",
    "MXAdam",
    "MXMomentum",
    "MXNesterov",
    "MXOptimizer",
    "MXRMSprop",
]

#: An ``mx.nd.NDArray`` (MXNet ships no type information).
NDArrayMX = Any
#: A numpy array of any dtype (numpy 1.23's ``ndarray`` needs its type arguments).
Array = NDArray[Any]


@dataclass
class _Slot:
    """One parameter as MXNet's optimizer steps it."""

    index: int
    weight: NDArrayMX
    #: MXNet's state of the parameter (``None``, an ``NDArray`` or a tuple of them).
    state: Any
    #: Steps taken (Adam's bias corrections count from 1).
    steps: int
    #: The learning rate MXNet's state is scaled with, where it folds it in.
    scale: float | None = None
    #: The gradient array last found to fit the weight (the executor hands the same
    #: buffers every step: checked once).
    checked: Any = None


class MXOptimizer(NativeOptimizer):
    """A d5 optimizer run by an ``mx.optimizer.Optimizer``; subclasses configure it.

    A subclass gives :meth:`make` (MXNet's optimizer), :meth:`fresh_state` and the
    conversions of its state to and from the reference's layout (:meth:`to_reference`,
    :meth:`from_reference`). The base class's :attr:`state` and :attr:`steps` hold state
    not yet given to MXNet: loaded state waits there until its parameter's next step.
    """

    native: ClassVar[str | None] = "mxnet"
    #: Whether MXNet's state holds ``-lr`` times the reference's (see the module doc).
    folds_lr: ClassVar[bool] = False
    #: Whether MXNet's optimizer updates several parameters in one call (its
    #: ``aggregate_num``, as Gluon's ``Trainer`` calls it): one ``multi_*`` operator
    #: per group of parameters instead of one per parameter, the same arithmetic.
    aggregates: ClassVar[bool] = False

    def __init__(self, lr: float = 0.01, **hyper: float) -> None:
        super().__init__(lr, **hyper)
        self._mx = mxnet()
        self._optimizer = self.make()
        self._slots: dict[str, _Slot] = {}
        self._live: dict[str, NDArrayMX] = {}
        self._bound = False

    # -- what a subclass gives -------------------------------------------------

    def make(self) -> Any:
        """MXNet's optimizer, configured as the module docstring says."""
        raise NotImplementedError

    def fresh_state(self, weight: NDArrayMX) -> Any:
        """MXNet's initial state for ``weight`` (its dtype and context)."""
        return None

    def to_reference(self, slot: _Slot) -> dict[str, Array]:
        """``slot``'s MXNet state in the reference's layout (numpy copies)."""
        return {}

    def from_reference(self, loaded: Mapping[str, Array], weight: NDArrayMX, lr: float) -> Any:
        """MXNet's state from the reference's ``loaded`` arrays (a missing one starts as
        the reference's does); ``lr`` is the step's learning rate."""
        return self.fresh_state(weight)

    def configure(self, slot: _Slot) -> None:
        """Set what MXNet's optimizer reads per step, before ``slot``'s step."""

    def folded(self, slot: _Slot) -> NDArrayMX | None:
        """The state array holding ``-lr`` times the reference's (``folds_lr``)."""
        return None

    # -- helpers for subclasses ------------------------------------------------

    def _zeros(self, weight: NDArrayMX, value: float = 0.0) -> NDArrayMX:
        """A state array shaped as ``weight``, every element ``value``: zeros are one
        engine operation (``nd.full`` is an allocation and an indexed assignment)."""
        mx_nd, shape, ctx, dtype = self._mx.nd, weight.shape, weight.context, weight.dtype
        if value == 0 and not np.signbit(value):  # -0.0 stays as full makes it
            return mx_nd.zeros(shape, ctx=ctx, dtype=dtype)
        return mx_nd.full(shape, value, ctx=ctx, dtype=dtype)

    def _array(self, value: Array, weight: NDArrayMX, slot: str, name: str = "") -> NDArrayMX:
        array = np.asarray(value, dtype=weight.dtype)
        if array.shape != tuple(weight.shape):
            raise UsageError(
                f"optimizer {self.name!r}: the loaded {slot!r} has shape {array.shape}, "
                f"the parameter has {tuple(weight.shape)}"
            )
        return self._mx.nd.array(array, ctx=weight.context, dtype=weight.dtype)

    def kept(self) -> tuple[str, ...]:
        """The reference's state names this optimizer keeps."""
        return ()

    # -- stepping --------------------------------------------------------------

    def _slot(self, name: str, weight: NDArrayMX, lr: float) -> _Slot:
        slot = self._slots.get(name)
        if slot is None:
            loaded = self.state.pop(name, {})
            self.check_loaded_state(name, loaded, self.kept())
            state = self.from_reference(loaded, weight, lr) if loaded else self.fresh_state(weight)
            slot = _Slot(len(self._slots), weight, state, self.steps.pop(name, 0))
            if loaded and self.folds_lr:
                slot.scale = lr if lr != 0 else 1.0
            self._slots[name] = slot
        return slot

    def _update(self, slot: _Slot, grad: NDArrayMX) -> None:
        """One MXNet update of ``slot`` with ``grad`` at :attr:`lr`."""
        optimizer, lr = self._optimizer, float(self.lr)
        weight = slot.weight
        if self.folds_lr:
            folded = self.folded(slot)
            if lr == 0:  # the weight stays; the state advances at its own scale
                weight = weight.copy()
                slot.scale = slot.scale or 1.0
                lr = slot.scale
            elif slot.scale is not None and slot.scale != lr and folded is not None:
                folded *= lr / slot.scale
                slot.scale = lr
            else:
                slot.scale = lr
        slot.steps += 1
        optimizer.lr = lr
        # MXNet counts steps per index (Adam's bias corrections) and adds this one: the
        # count is ours, so that loaded state resumes at its step
        optimizer._index_update_count[slot.index] = slot.steps - 1
        self.configure(slot)
        optimizer.update(slot.index, weight, grad, slot.state)

    def _update_all(self, slots: list[_Slot], grads: list[NDArrayMX]) -> None:
        """:meth:`_update` of each slot with its gradient, in MXNet's aggregated calls
        where the optimizer :attr:`aggregates` and no slot needs a step of its own (its
        state rescaled to a new learning rate, or a step at ``lr == 0``)."""
        lr = float(self.lr)
        plain = not self.folds_lr or (lr != 0 and all(s.scale in (None, lr) for s in slots))
        plain = plain and type(self).configure is MXOptimizer.configure  # nothing per slot
        if not (self.aggregates and plain and slots):
            for slot, grad in zip(slots, grads, strict=True):
                self._update(slot, grad)
            return
        optimizer = self._optimizer
        optimizer.lr = lr
        by_dtype: dict[Any, list[tuple[_Slot, NDArrayMX]]] = {}
        for slot, grad in zip(slots, grads, strict=True):
            slot.steps += 1
            optimizer._index_update_count[slot.index] = slot.steps - 1
            if self.folds_lr:
                slot.scale = lr
            by_dtype.setdefault(slot.weight.dtype, []).append((slot, grad))
        size = max(1, int(optimizer.aggregate_num))
        for group in by_dtype.values():
            for start in range(0, len(group), size):
                part = group[start : start + size]
                optimizer.update(
                    [s.index for s, _ in part],
                    [s.weight for s, _ in part],
                    [g for _, g in part],
                    [s.state for s, _ in part],
                )

    def _gradient(
        self, name: str, grad: Any, weight: NDArrayMX, slot: _Slot | None = None
    ) -> NDArrayMX:
        if slot is not None and grad is slot.checked:
            return grad
        mx = self._mx
        if grad is None:
            return mx.nd.zeros(weight.shape, ctx=weight.context, dtype=weight.dtype)
        if not isinstance(grad, mx.nd.NDArray):
            grad = mx.nd.array(np.asarray(grad, dtype=weight.dtype), ctx=weight.context,
                               dtype=weight.dtype)  # fmt: skip
        if tuple(grad.shape) != tuple(weight.shape):
            raise UsageError(
                f"optimizer {self.name!r}: gradient {name!r} has shape {tuple(grad.shape)}, "
                f"parameter has {tuple(weight.shape)}"
            )
        if grad.dtype != weight.dtype:
            return grad.astype(weight.dtype)
        if slot is not None:
            slot.checked = grad
        return grad

    # -- numpy use -------------------------------------------------------------

    def step(self, params: Mapping[str, Array], grads: Mapping[str, Array]) -> None:
        """Update numpy ``params`` in place: copied into ``NDArray``\\ s, stepped by MXNet,
        copied back. A parameter without a gradient is left alone."""
        if self._bound:
            raise UsageError(f"optimizer {self.name!r} is bound to an executor; call native_step")
        mx, lr = self._mx, float(self.lr)
        stepped = []
        for name, p, grad in self.numpy_gradients(params, grads):
            slot = self._slots.get(name)
            if slot is None:
                slot = self._slot(name, mx.nd.array(p, dtype=p.dtype), lr)
            else:
                self.check_state_layout(name, p, slot.weight.dtype, slot.weight.shape)
                slot.weight[:] = p
            self._update(slot, self._gradient(name, grad, slot.weight))
            stepped.append(name)
        for name in stepped:
            np.copyto(params[name], self._slots[name].weight.asnumpy())

    # -- native use ------------------------------------------------------------

    def bind(self, executor: object) -> None:
        """Update ``executor``'s live ``NDArray``\\ s from now on (state taken so far is
        forgotten; state loaded by :meth:`load_state_dict` applies at the next step)."""
        found = self.native_parameters(
            executor,
            "mxnet",
            "an NDArray",
            lambda value: isinstance(value, self._mx.nd.NDArray),
            lambda value: None if np.dtype(value.dtype).kind == "f" else str(np.dtype(value.dtype)),
        )
        self._live, self._bound = found, True
        self.forget()

    def native_step(self, native_grads: object) -> None:
        """Step the bound ``NDArray``\\ s with their gradients: a mapping by name (a
        parameter left out is left alone) or a sequence in bound order; ``None`` counts
        as zeros. Only enqueues MXNet's work."""
        if not self._bound:
            raise UsageError(f"optimizer {self.name!r}: call bind(executor) before native_step")
        names, grads = self.native_gradients(native_grads, self._live)
        lr = float(self.lr)
        slots, checked = [], []
        for name, grad in zip(names, grads, strict=True):
            weight = self._live[name]
            slot = self._slot(name, weight, lr)
            slots.append(slot)
            checked.append(self._gradient(name, grad, weight, slot))
        self._update_all(slots, checked)

    # -- state -----------------------------------------------------------------

    def forget(self) -> None:
        """Drop MXNet's state of every parameter (and its optimizer's step counts)."""
        self._slots = {}
        self._optimizer = self.make()

    def live_state(self) -> dict[str, tuple[int, dict[str, Array]]]:
        """Per parameter stepped, its step count and MXNet's state in the reference's
        layout (numpy copies)."""
        return {name: (slot.steps, self.to_reference(slot)) for name, slot in self._slots.items()}


#: What every MXNet optimizer here is built with: no weight decay, no gradient rescaling,
#: no clipping (the reference has none of them).
_PLAIN: dict[str, Any] = {"wd": 0.0, "rescale_grad": 1.0, "clip_gradient": None}


class MXSGD(MXOptimizer):
    """Plain SGD: ``p -= lr g`` (``mx.optimizer.SGD``)."""

    name: ClassVar[str] = "mx-sgd"
    aggregates: ClassVar[bool] = True

    def make(self) -> Any:
        return self._mx.optimizer.SGD(learning_rate=self.lr, momentum=0.0, lazy_update=False,
                                      **_PLAIN)  # fmt: skip


class MXMomentum(MXOptimizer):
    """Heavy-ball momentum (``SGD(momentum=m)``), the reference's ``v = m v + g``;
    ``p -= lr v`` through MXNet's ``u = -lr v``."""

    name: ClassVar[str] = "mx-momentum"
    defaults: ClassVar[dict[str, float]] = {"momentum": 0.9}
    folds_lr: ClassVar[bool] = True
    aggregates: ClassVar[bool] = True

    def make(self) -> Any:
        return self._mx.optimizer.SGD(learning_rate=self.lr, momentum=self.hyper["momentum"],
                                      lazy_update=False, **_PLAIN)  # fmt: skip

    def kept(self) -> tuple[str, ...]:
        return ("velocity",)

    def fresh_state(self, weight: NDArrayMX) -> Any:
        return self._zeros(weight)

    def folded(self, slot: _Slot) -> NDArrayMX | None:
        return slot.state

    def to_reference(self, slot: _Slot) -> dict[str, Array]:
        scale = slot.scale or 1.0
        return {"velocity": np.array(slot.state.asnumpy() / -scale)}

    def from_reference(self, loaded: Mapping[str, Array], weight: NDArrayMX, lr: float) -> Any:
        if "velocity" not in loaded:
            return self._zeros(weight)
        return self._array(np.asarray(loaded["velocity"]) * -(lr or 1.0), weight, "velocity")


class MXNesterov(MXOptimizer):
    """Nesterov momentum (``mx.optimizer.NAG``), the reference's ``v = m v + g``;
    ``p -= lr (g + m v)`` through MXNet's ``u = -lr v``."""

    name: ClassVar[str] = "mx-nesterov"
    defaults: ClassVar[dict[str, float]] = {"momentum": 0.9}
    folds_lr: ClassVar[bool] = True

    def make(self) -> Any:
        return self._mx.optimizer.NAG(learning_rate=self.lr, momentum=self.hyper["momentum"],
                                      **_PLAIN)  # fmt: skip

    def kept(self) -> tuple[str, ...]:
        return ("velocity",)

    def fresh_state(self, weight: NDArrayMX) -> Any:
        # NAG takes no state (plain SGD) at momentum 0; it keeps one otherwise
        return self._zeros(weight) if self.hyper["momentum"] != 0 else None

    def folded(self, slot: _Slot) -> NDArrayMX | None:
        return slot.state

    def to_reference(self, slot: _Slot) -> dict[str, Array]:
        if slot.state is None:
            return {"velocity": np.zeros(slot.weight.shape, dtype=slot.weight.dtype)}
        return {"velocity": slot.state.asnumpy() / -(slot.scale or 1.0)}

    def from_reference(self, loaded: Mapping[str, Array], weight: NDArrayMX, lr: float) -> Any:
        if "velocity" not in loaded or self.hyper["momentum"] == 0:
            return self.fresh_state(weight)
        return self._array(np.asarray(loaded["velocity"]) * -(lr or 1.0), weight, "velocity")


class MXAdam(MXOptimizer):
    """Adam (``mx.optimizer.Adam``), its ``epsilon`` set each step so that ``eps`` sits
    beside the bias-corrected root, as in the reference."""

    name: ClassVar[str] = "mx-adam"
    defaults: ClassVar[dict[str, float]] = {"beta1": 0.9, "beta2": 0.999, "eps": 1e-8}

    def __init__(self, lr: float = 1e-3, **hyper: float) -> None:
        for key in ("beta1", "beta2"):
            value = hyper.get(key, self.defaults[key])
            if isinstance(value, int | float) and not 0 <= value < 1:
                raise UsageError(f"optimizer 'mx-adam': {key} must be in [0, 1), got {value!r}")
        super().__init__(lr, **hyper)

    def make(self) -> Any:
        h = self.hyper
        return self._mx.optimizer.Adam(learning_rate=self.lr, beta1=h["beta1"], beta2=h["beta2"],
                                       epsilon=h["eps"], lazy_update=False,
                                       **_PLAIN)  # fmt: skip

    def kept(self) -> tuple[str, ...]:
        return ("exp_avg", "exp_avg_sq")

    def fresh_state(self, weight: NDArrayMX) -> Any:
        return (self._zeros(weight), self._zeros(weight))

    def configure(self, slot: _Slot) -> None:
        # MXNet: lr * sqrt(c2) / c1 * m / (sqrt(v) + epsilon); the reference:
        # lr * (m / c1) / (sqrt(v / c2) + eps): equal when epsilon = eps * sqrt(c2)
        c2 = 1.0 - self.hyper["beta2"] ** slot.steps
        self._optimizer.epsilon = self.hyper["eps"] * math.sqrt(c2)

    def to_reference(self, slot: _Slot) -> dict[str, Array]:
        mean, var = slot.state
        return {"exp_avg": mean.asnumpy(), "exp_avg_sq": var.asnumpy()}

    def from_reference(self, loaded: Mapping[str, Array], weight: NDArrayMX, lr: float) -> Any:
        return tuple(
            self._array(loaded[k], weight, k) if k in loaded else self._zeros(weight)
            for k in ("exp_avg", "exp_avg_sq")
        )


class MXAdagrad(MXOptimizer):
    """Adagrad (``mx.optimizer.AdaGrad``) from ``initial_accumulator``, with ``eps**2``
    inside MXNet's root for the reference's ``eps`` beside it (see the module doc)."""

    name: ClassVar[str] = "mx-adagrad"
    defaults: ClassVar[dict[str, float]] = {"eps": 1e-10, "initial_accumulator": 0.0}

    def make(self) -> Any:
        return self._mx.optimizer.AdaGrad(learning_rate=self.lr, eps=self.hyper["eps"] ** 2,
                                          **_PLAIN)  # fmt: skip

    def kept(self) -> tuple[str, ...]:
        return ("sum",)

    def fresh_state(self, weight: NDArrayMX) -> Any:
        return self._zeros(weight, float(self.hyper["initial_accumulator"]))

    def to_reference(self, slot: _Slot) -> dict[str, Array]:
        return {"sum": slot.state.asnumpy()}

    def from_reference(self, loaded: Mapping[str, Array], weight: NDArrayMX, lr: float) -> Any:
        if "sum" not in loaded:
            return self.fresh_state(weight)
        return self._array(loaded["sum"], weight, "sum")


class MXRMSprop(MXOptimizer):
    """RMSprop. Uncentered: ``mx.optimizer.Adam`` with ``beta1=0`` (its first moment is
    the gradient) and ``beta2=alpha``, its learning rate divided by Adam's correction
    ``sqrt(1-alpha^t)`` each step: exactly the reference's ``g / (sqrt(s) + eps)``, which
    MXNet's own ``RMSProp`` (``eps`` inside the root) is not. Centered:
    ``mx.optimizer.RMSProp(centered=True)``, ``gamma1=alpha``, ``gamma2=momentum`` (the
    learning rate folded in), ``eps**2`` inside the root (see the module doc)."""

    name: ClassVar[str] = "mx-rmsprop"
    defaults: ClassVar[dict[str, float]] = {
        "alpha": 0.99,
        "eps": 1e-8,
        "momentum": 0.0,
        "centered": False,
    }

    def __init__(self, lr: float = 0.01, **hyper: float) -> None:
        alpha = hyper.get("alpha", self.defaults["alpha"])
        if isinstance(alpha, int | float) and not 0 <= alpha < 1:
            raise UsageError(f"optimizer 'mx-rmsprop': alpha must be in [0, 1), got {alpha!r}")
        centered = bool(hyper.get("centered", self.defaults["centered"]))
        if float(hyper.get("momentum", 0.0)) > 0 and not centered:
            raise UsageError(
                "optimizer 'mx-rmsprop': MXNet's uncentered RMSProp has no momentum; set "
                "centered=1 to use momentum, or momentum=0"
            )
        super().__init__(lr, **hyper)

    @property
    def folds_lr(self) -> bool:  # type: ignore[override]
        return bool(self.hyper["centered"])

    def make(self) -> Any:
        h = self.hyper
        if not h["centered"]:
            return self._mx.optimizer.Adam(learning_rate=self.lr, beta1=0.0, beta2=h["alpha"],
                                           epsilon=h["eps"], lazy_update=False,
                                           **_PLAIN)  # fmt: skip
        return self._mx.optimizer.RMSProp(learning_rate=self.lr, gamma1=h["alpha"],
                                          gamma2=h["momentum"], epsilon=h["eps"] ** 2,
                                          centered=True, **_PLAIN)  # fmt: skip

    def configure(self, slot: _Slot) -> None:
        if not self.hyper["centered"]:  # undo Adam's bias correction (beta1 = 0: c1 = 1)
            correction = 1.0 - self.hyper["alpha"] ** slot.steps
            if correction <= 0:
                raise UsageError("optimizer 'mx-rmsprop': alpha must be below 1")
            self._optimizer.lr = self._optimizer.lr / math.sqrt(correction)

    def kept(self) -> tuple[str, ...]:
        names = ["square_avg"]
        if self.hyper["centered"]:
            names.append("grad_avg")
        if self.hyper["momentum"] > 0:
            names.append("momentum_buffer")
        return tuple(names)

    def fresh_state(self, weight: NDArrayMX) -> Any:
        # uncentered (Adam): (first moment, unused; square_avg); centered: (n, g, delta)
        count = 3 if self.hyper["centered"] else 2
        return tuple(self._zeros(weight) for _ in range(count))

    def folded(self, slot: _Slot) -> NDArrayMX | None:
        return slot.state[2] if self.hyper["centered"] else None

    def to_reference(self, slot: _Slot) -> dict[str, Array]:
        if not self.hyper["centered"]:
            return {"square_avg": slot.state[1].asnumpy()}
        found = {"square_avg": slot.state[0].asnumpy(), "grad_avg": slot.state[1].asnumpy()}
        if self.hyper["momentum"] > 0:
            found["momentum_buffer"] = slot.state[2].asnumpy() / -(slot.scale or 1.0)
        return found

    def from_reference(self, loaded: Mapping[str, Array], weight: NDArrayMX, lr: float) -> Any:
        def take(key: str, factor: float = 1.0) -> NDArrayMX:
            if key not in loaded:
                return self._zeros(weight)
            return self._array(np.asarray(loaded[key]) * factor, weight, key)

        if not self.hyper["centered"]:
            return (self._zeros(weight), take("square_avg"))
        return (take("square_avg"), take("grad_avg"), take("momentum_buffer", -(lr or 1.0)))
