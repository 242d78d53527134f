"""TensorFlow optimizers behind d5's :class:`~d5core.api.Optimizer` interface.

Each class is registered as ``tf-<name>`` in ``d5.optimizers``, takes the same options
(and defaults) as the numpy reference optimizer ``<name>`` and reproduces its update
(PyTorch's formulation; docs/optimizers.md), op for op, in float64 and in float32.

The updates are written here in TensorFlow ops rather than taken from
``keras.optimizers``, because no Keras 3.15 optimizer reproduces its reference (five
float64 steps, a learning rate that changes between steps):

- Keras keeps the learning rate in a float32 variable, so even plain ``SGD`` is off by
  ~1e-8 on float64 parameters;
- ``SGD(momentum=...)`` (and ``nesterov=True``) accumulates ``v = m v - lr g``, which
  leaves the reference's trajectory as soon as ``lr`` changes (0.1 apart here);
- ``Adam`` / ``AdamW`` add ``eps`` to the root of the uncorrected second moment (2.5e-6
  apart, over the 1e-6 the acceptance allows);
- ``Adagrad`` puts ``eps`` inside the root; ``RMSprop`` too, and folds ``lr`` into its
  momentum buffer (0.02 apart);
- an eager Keras step costs ~0.8 ms of Python per step on a two-tensor model.

How the updates run: every parameter's update is one compiled ``tf.function`` (one per
set of stepped parameters, built on its first step), whose input signature is fixed by
the parameters' shapes and dtypes; the learning rate is a float64 scalar argument
(made anew only when :attr:`lr` changes) and the step counts (Adam's bias corrections)
int64 variables, so a schedule never causes a retrace. State (moments,
accumulators) lives in ``tf.Variable``\\ s created on a parameter's first step.

Two ways to use one:

- **native** (``native = "tensorflow"``): :meth:`TFOptimizer.bind` takes the executor's
  live ``tf.Variable``\\ s (``executor.native_parameters()``); then
  :meth:`TFOptimizer.native_step` takes their gradients (a mapping by name, or a
  sequence in the executor's trainable order) and updates the variables in place. No
  numpy conversion happens.
- **numpy**: :meth:`TFOptimizer.step` copies numpy parameters and gradients into
  variables it owns, steps, and writes the parameters back in place. Any executor works.

:meth:`~TFOptimizer.state_dict` has the numpy reference's layout (``steps``, and
``state`` by parameter then by the reference's state names: ``velocity``, ``exp_avg``,
``exp_avg_sq``, ``sum``, ``square_avg``, ``grad_avg``, ``momentum_buffer``), so a state
taken either way loads into the other, and compares with the reference's directly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np

from d5_plugin_tensorflow._tf import tensorflow
from d5core.api import UsageError
from d5core.onnx import NativeOptimizer

__all__ = [
    "TFSGD",
    "TFAdagrad",
    "TFAdam",
    "TFAdamW",
    "TFMomentum",
    "TFNesterov",
    "TFOptimizer",
    "TFRMSprop",
]

tf = tensorflow()

#: A ``tf.Variable`` / ``tf.Tensor`` (TensorFlow ships no type information).
Variable = Any
Tensor = Any
_StepFunction = Callable[[list[Tensor], Tensor], Any]


class TFOptimizer(NativeOptimizer):
    """A d5 optimizer whose update runs in TensorFlow; subclasses give the update.

    A subclass declares :attr:`defaults`, its state names (:meth:`slot_names`, with
    :meth:`slot_initial` values) and :meth:`apply` (the update of one parameter in
    TensorFlow ops, traced once).

    The base class's :attr:`state` and :attr:`steps` hold state not yet in variables:
    state loaded by :meth:`load_state_dict` waits there until its parameter's next step.
    """

    native: ClassVar[str | None] = "tensorflow"
    #: Compile the step with XLA: one fused computation for all parameters, which pays
    #: off with many or large parameters (Adam on 40 tensors of 256x256 on CPU: 3.1 ms a
    #: step against 7.2 ms; the digits MLP: the same ~0.1 ms), but only after a
    #: first-step compile of 0.1-0.5 s that time to accuracy pays in full (digits MLP
    #: with ``tf-momentum``: 0.14-0.49 s of a run of under a second, against 0.02-0.04 s
    #: to trace the step without XLA); results differ from the reference by an ulp or so
    #: (fused multiply-adds). ``False`` (the default): TensorFlow's own kernels, op for
    #: op the reference's. A subclass for long runs of many or large parameters may
    #: set it.
    jit_compile: ClassVar[bool] = False

    def __init__(self, lr: float = 0.01, **hyper: float) -> None:
        super().__init__(lr, **hyper)
        self._params: dict[str, Variable] = {}
        self._order: tuple[str, ...] = ()
        self._layouts: dict[str, Any] = {}
        self._bound = False
        self._slots: dict[str, dict[str, Variable]] = {}
        self._counts: dict[str, Variable] = {}
        self._compiled: dict[tuple[str, ...], _StepFunction] = {}
        self._lr_value: float | None = None
        self._lr_tensor: Tensor = None

    # -- what a subclass gives -------------------------------------------------

    def slot_names(self) -> tuple[str, ...]:
        """The state kept per parameter, named as the numpy reference names it."""
        return ()

    def slot_initial(self, slot: str) -> float:
        """The value the state ``slot`` starts at (zero unless overridden)."""
        return 0.0

    def apply(
        self, p: Variable, g: Tensor, slots: Mapping[str, Variable], lr: Tensor, t: Tensor
    ) -> None:
        """Update ``p`` in place from ``g`` (same dtype) in TensorFlow ops (traced).

        ``slots`` is the parameter's state by :meth:`slot_names`; ``lr`` the learning
        rate and ``t`` the step count from 1, both float64 scalars.
        """
        raise NotImplementedError

    # -- native use ------------------------------------------------------------

    def bind(self, executor: object) -> None:
        """Update ``executor``'s trainable variables from now on; state taken so far is
        forgotten (state loaded by :meth:`load_state_dict` applies at the next step)."""
        self._params = self.native_parameters(
            executor,
            "tensorflow",
            "a tf.Variable",
            lambda value: isinstance(value, tf.Variable),
            lambda value: None if value.dtype.is_floating else value.dtype.name,
        )
        self._order = tuple(self._params)
        # Variables the executor keeps in another layout than ONNX's (convolution
        # kernels channels-last, Gemm weights after a channels-last Flatten): name ->
        # its layout (to_native / to_onnx). State is saved and loaded in the ONNX
        # layout, as the reference's.
        layouts = getattr(executor, "native_layouts", None)
        self._layouts = dict(layouts()) if callable(layouts) else {}
        self._bound = True
        self.forget()

    def native_step(self, native_grads: object) -> None:
        """Step the bound variables with their gradients: a mapping by name (a parameter
        left out is left alone) or a sequence in bound order; ``None`` counts as zeros,
        ``tf.IndexedSlices`` are made dense."""
        if not self._bound:
            raise UsageError(f"optimizer {self.name!r}: call bind(executor) before native_step")
        names, grads = self.native_gradients(native_grads, self._params)
        self._run(names, [self._as_gradient(n, g) for n, g in zip(names, grads, strict=True)])

    def _as_gradient(self, name: str, grad: Any) -> Tensor:
        p = self._params[name]
        if grad is None:
            return tf.zeros_like(p)
        if isinstance(grad, tf.IndexedSlices):
            grad = tf.convert_to_tensor(grad)
        dtype = getattr(grad, "dtype", None)
        if dtype is None:  # numpy or a Python number
            return tf.constant(np.asarray(grad, dtype=p.dtype.as_numpy_dtype))
        if dtype != p.dtype:
            return tf.cast(grad, p.dtype)
        return grad

    # -- numpy use -------------------------------------------------------------

    def step(self, params: Mapping[str, np.ndarray], grads: Mapping[str, np.ndarray]) -> None:
        """Update numpy ``params`` in place: copied into owned variables, stepped, copied
        back. A parameter without a gradient is left alone."""
        if self._bound:
            raise UsageError(f"optimizer {self.name!r} is bound to an executor; call native_step")
        tensors: dict[str, Tensor] = {}
        for name, p, grad in self.numpy_gradients(params, grads):
            v = self._params.get(name)
            if v is None:
                v = self._params[name] = tf.Variable(np.array(p), trainable=False)
                self._order = tuple(self._params)
            else:
                self.check_state_layout(name, p, v.dtype.as_numpy_dtype, v.shape)
                v.assign(p)
            tensors[name] = tf.constant(np.asarray(grad, dtype=p.dtype))
        names = tuple(n for n in self._order if n in tensors)
        self._run(names, [tensors[n] for n in names])
        for name in names:
            np.copyto(params[name], self._params[name].numpy())

    # -- shared ----------------------------------------------------------------

    def _run(self, names: tuple[str, ...], grads: list[Tensor]) -> None:
        """Run the compiled update of ``names`` with ``grads`` (tensors of their dtypes)."""
        fn = self._compiled.get(names)
        if fn is None:
            fn = self._compile(names)
        lr = float(self.lr)
        if lr != self._lr_value:  # a new float64 scalar (2 us), not a retrace
            self._lr_tensor, self._lr_value = tf.constant(lr, dtype=tf.float64), lr
        try:
            fn(grads, self._lr_tensor)
        except (TypeError, ValueError) as exc:
            for name, g in zip(names, grads, strict=True):
                p = self._params[name]
                if tuple(g.shape) != tuple(p.shape):
                    raise UsageError(
                        f"optimizer {self.name!r}: gradient {name!r} has shape "
                        f"{tuple(g.shape)}, parameter has {tuple(p.shape)}"
                    ) from None
            raise UsageError(f"optimizer {self.name!r}: cannot step: {exc}") from None

    def _compile(self, names: tuple[str, ...]) -> _StepFunction:
        """The ``tf.function`` that steps ``names`` (state created first, eagerly)."""
        for name in names:
            if name not in self._slots:
                self._create_state(name)
        params = [self._params[n] for n in names]
        slots = [self._slots[n] for n in names]
        counts = [self._counts[n] for n in names]
        apply = self.apply

        def run(grads: list[Tensor], lr: Tensor) -> None:
            for p, g, s, c in zip(params, grads, slots, counts, strict=True):
                t = tf.cast(c.assign_add(1), tf.float64)
                apply(p, g, s, lr, t)

        signature = [
            [tf.TensorSpec(p.shape, p.dtype) for p in params],
            tf.TensorSpec((), tf.float64),
        ]
        traced = tf.function(
            run, input_signature=signature, autograph=False, jit_compile=self.jit_compile
        )
        # the concrete function: calling it skips the dispatch of a polymorphic
        # tf.function (about 80 us a step on the digits MLP)
        fn: _StepFunction = traced.get_concrete_function()
        self._compiled[names] = fn
        return fn

    def _create_state(self, name: str) -> None:
        """The variables of ``name``'s state: from a loaded state, else initial values."""
        p = self._params[name]
        dtype = p.dtype.as_numpy_dtype
        loaded = self.state.pop(name, {})
        wanted = self.slot_names()
        self.check_loaded_state(name, loaded, wanted)
        slots: dict[str, Variable] = {}
        for slot in wanted:
            if slot in loaded:
                value = np.asarray(loaded[slot], dtype=dtype)
                layout = self._layouts.get(name)
                if layout is not None:  # saved in the ONNX layout, kept in the variable's
                    value = layout.to_native(value)
                if value.shape != tuple(p.shape):
                    raise UsageError(
                        f"optimizer {self.name!r}: the loaded {slot!r} of {name!r} has shape "
                        f"{value.shape}, the parameter has {tuple(p.shape)}"
                    )
            else:
                value = np.full(tuple(p.shape), self.slot_initial(slot), dtype=dtype)
            slots[slot] = tf.Variable(value, trainable=False)
        self._slots[name] = slots
        self._counts[name] = tf.Variable(self.steps.pop(name, 0), dtype=tf.int64, trainable=False)

    def forget(self) -> None:
        """Drop the state variables and the compiled steps."""
        self._slots, self._counts, self._compiled = {}, {}, {}

    def live_state(self) -> dict[str, tuple[int, dict[str, np.ndarray]]]:
        """Per parameter stepped, its step count and state arrays (copies) in the ONNX
        layout, as the numpy reference keeps them."""
        live = {}
        for name, slots in self._slots.items():
            layout = self._layouts.get(name)
            arrays = {
                s: np.array(v.numpy() if layout is None else layout.to_onnx(v.numpy()))
                for s, v in slots.items()
            }
            live[name] = (int(self._counts[name].numpy()), arrays)
        return live

    def reset(self) -> None:
        """Forget all state; a bound optimizer stays bound to the same variables."""
        super().reset()
        if not self._bound:
            self._params, self._order = {}, ()


def _like(value: Any, dtype: Any) -> Tensor:
    """``value`` (a float64 scalar tensor or a Python number) as a scalar of ``dtype``,
    rounded once (a Python number goes straight to ``dtype``, never through float32)."""
    if isinstance(value, int | float):
        return tf.constant(value, dtype=dtype)
    return tf.cast(value, dtype)


class TFSGD(TFOptimizer):
    """Plain SGD: ``p -= lr g``."""

    name: ClassVar[str] = "tf-sgd"

    def apply(
        self, p: Variable, g: Tensor, slots: Mapping[str, Variable], lr: Tensor, t: Tensor
    ) -> None:
        p.assign_sub(_like(lr, p.dtype) * g)


class TFMomentum(TFOptimizer):
    """Heavy-ball momentum, the reference's form: ``v = m v + g``; ``p -= lr v``."""

    name: ClassVar[str] = "tf-momentum"
    defaults: ClassVar[dict[str, float]] = {"momentum": 0.9}

    def slot_names(self) -> tuple[str, ...]:
        return ("velocity",)

    def apply(
        self, p: Variable, g: Tensor, slots: Mapping[str, Variable], lr: Tensor, t: Tensor
    ) -> None:
        # TensorFlow's fused kernel computes exactly this (accum = accum * m + g;
        # var -= lr * accum) as one op instead of five, which cuts the step's trace and
        # first call by a third (LeNet-5's 10 parameters: 90-150 ms to 60-95 ms, in a
        # run of under a second)
        tf.raw_ops.ResourceApplyMomentum(
            var=p.handle, accum=slots["velocity"].handle, lr=_like(lr, p.dtype), grad=g,
            momentum=_like(self.hyper["momentum"], p.dtype), use_locking=False,
            use_nesterov=False,
        )  # fmt: skip


class TFNesterov(TFOptimizer):
    """Nesterov momentum, the reference's form: ``v = m v + g``; ``p -= lr (g + m v)``."""

    name: ClassVar[str] = "tf-nesterov"
    defaults: ClassVar[dict[str, float]] = {"momentum": 0.9}

    def slot_names(self) -> tuple[str, ...]:
        return ("velocity",)

    def apply(
        self, p: Variable, g: Tensor, slots: Mapping[str, Variable], lr: Tensor, t: Tensor
    ) -> None:
        m = _like(self.hyper["momentum"], p.dtype)
        v = slots["velocity"]
        v.assign(v * m + g)
        p.assign_sub(_like(lr, p.dtype) * (g + m * v))


class TFAdam(TFOptimizer):
    """Adam with both bias corrections and ``eps`` outside the corrected root."""

    name: ClassVar[str] = "tf-adam"
    defaults: ClassVar[dict[str, float]] = {"beta1": 0.9, "beta2": 0.999, "eps": 1e-8}

    def __init__(self, lr: float = 1e-3, **hyper: float) -> None:
        super().__init__(lr, **hyper)

    def slot_names(self) -> tuple[str, ...]:
        return ("exp_avg", "exp_avg_sq")

    def apply(
        self, p: Variable, g: Tensor, slots: Mapping[str, Variable], lr: Tensor, t: Tensor
    ) -> None:
        b1, b2, eps = self.hyper["beta1"], self.hyper["beta2"], self.hyper["eps"]
        dt = p.dtype
        m, s = slots["exp_avg"], slots["exp_avg_sq"]
        m.assign(m * _like(b1, dt) + _like(1 - b1, dt) * g)
        s.assign(s * _like(b2, dt) + _like(1 - b2, dt) * g * g)
        # the corrections in float64, as the reference computes 1 - b**t in Python
        c1 = _like(1 - tf.pow(tf.constant(b1, tf.float64), t), dt)
        c2 = _like(1 - tf.pow(tf.constant(b2, tf.float64), t), dt)
        p.assign_sub(_like(lr, dt) * (m / c1) / (tf.sqrt(s / c2) + _like(eps, dt)))


class TFAdamW(TFAdam):
    """Adam with decoupled weight decay: ``p *= 1 - lr * weight_decay`` first."""

    name: ClassVar[str] = "tf-adamw"
    defaults: ClassVar[dict[str, float]] = {**TFAdam.defaults, "weight_decay": 0.01}

    def apply(
        self, p: Variable, g: Tensor, slots: Mapping[str, Variable], lr: Tensor, t: Tensor
    ) -> None:
        p.assign(p * _like(1 - lr * self.hyper["weight_decay"], p.dtype))
        super().apply(p, g, slots, lr, t)


class TFAdagrad(TFOptimizer):
    """Adagrad: ``s += g²`` (from ``initial_accumulator``); ``p -= lr g / (√s + eps)``."""

    name: ClassVar[str] = "tf-adagrad"
    defaults: ClassVar[dict[str, float]] = {"eps": 1e-10, "initial_accumulator": 0.0}

    def slot_names(self) -> tuple[str, ...]:
        return ("sum",)

    def slot_initial(self, slot: str) -> float:
        return float(self.hyper["initial_accumulator"])

    def apply(
        self, p: Variable, g: Tensor, slots: Mapping[str, Variable], lr: Tensor, t: Tensor
    ) -> None:
        s = slots["sum"]
        s.assign_add(g * g)
        p.assign_sub(_like(lr, p.dtype) * g / (tf.sqrt(s) + _like(self.hyper["eps"], p.dtype)))


class TFRMSprop(TFOptimizer):
    """RMSprop, the reference's form: ``eps`` outside the root, optional centering and
    momentum (the buffer accumulates ``g / d``; ``lr`` applies when stepping)."""

    name: ClassVar[str] = "tf-rmsprop"
    defaults: ClassVar[dict[str, float]] = {
        "alpha": 0.99,
        "eps": 1e-8,
        "momentum": 0.0,
        "centered": False,
    }

    def slot_names(self) -> tuple[str, ...]:
        names = ["square_avg"]
        if self.hyper["centered"]:
            names.append("grad_avg")
        if self.hyper["momentum"] > 0:
            names.append("momentum_buffer")
        return tuple(names)

    def apply(
        self, p: Variable, g: Tensor, slots: Mapping[str, Variable], lr: Tensor, t: Tensor
    ) -> None:
        alpha, eps, mom = self.hyper["alpha"], self.hyper["eps"], self.hyper["momentum"]
        dt = p.dtype
        s = slots["square_avg"]
        s.assign(s * _like(alpha, dt) + _like(1 - alpha, dt) * g * g)
        if self.hyper["centered"]:
            a = slots["grad_avg"]
            a.assign(a * _like(alpha, dt) + _like(1 - alpha, dt) * g)
            denom = tf.sqrt(s - a * a) + _like(eps, dt)
        else:
            denom = tf.sqrt(s) + _like(eps, dt)
        if mom > 0:
            b = slots["momentum_buffer"]
            b.assign(b * _like(mom, dt) + g / denom)
            p.assign_sub(_like(lr, dt) * b)
        else:
            p.assign_sub(_like(lr, dt) * g / denom)
