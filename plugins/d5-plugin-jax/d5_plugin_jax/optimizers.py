"""optax optimizers behind d5's :class:`~d5core.api.Optimizer` interface.

Each class is registered as ``jax-<name>`` in ``d5.optimizers``, takes the options (and
defaults) of the numpy reference optimizer ``<name>`` and follows its update rule
(PyTorch's formulation, docs/optimizers.md). The rules are chains of optax
transformations, arranged so that they are the reference's, not optax's own aliases:

- ``momentum`` / ``nesterov``: ``optax.trace`` then the learning rate, so the velocity
  accumulates gradients (``v = m v + g``) and a schedule changing ``lr`` scales the whole
  step (``optax.sgd(momentum=...)`` is the same chain);
- ``adam`` / ``adamw``: ``optax.scale_by_adam`` (``eps`` outside the corrected root),
  adamw adding ``weight_decay * p`` before the learning rate (the reference's
  ``p *= 1 - lr wd``, rearranged);
- ``rmsprop``: ``optax.scale_by_rms`` / ``scale_by_stddev`` with ``eps_in_sqrt=False``,
  then ``optax.trace`` for momentum, then the learning rate (``optax.rmsprop`` applies
  ``lr`` before its momentum, which leaves the reference's trajectory when ``lr``
  changes);
- ``adagrad``: a small transformation of our own (``optax.scale_by_rss`` puts ``eps``
  inside the root).

The learning rate is injected (``optax.inject_hyperparams``): the trainer sets
:attr:`~d5core.api.Optimizer.lr` before every step and the new value is an argument of
the compiled update, never a recompilation. Hyper-parameters are cast to the
parameter's dtype, as numpy rounds a Python float against a float32 array.

State is kept per parameter (one optax state each, created on the parameter's first
step), so that a step may update some parameters only and step counts are the
reference's, per parameter. :meth:`~JaxOptimizer.state_dict` has the reference's
layout (``velocity``, ``exp_avg``, ``exp_avg_sq``, ``sum``, ``square_avg``,
``grad_avg``, ``momentum_buffer``), so states move between the two.

Two ways to use one:

- **native** (``native = "jax"``): :meth:`JaxOptimizer.bind` takes the executor's live
  parameter mapping (``executor.native_parameters()``, a mutable mapping of
  ``jax.Array``): JAX arrays are immutable, so a step writes new arrays into it.
  :meth:`JaxOptimizer.native_step` takes the gradients as jax arrays. When bound to the
  JAX executor, the executor fuses forward, backward and this update into one compiled
  call (:mod:`d5_plugin_jax.training`); ``native_step`` then receives a marker
  (:class:`FusedStep`) and has nothing left to do.
- **numpy**: :meth:`JaxOptimizer.step` updates numpy arrays in place (converted to JAX
  and back); any executor, and the distribution schemes, use it so.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any, ClassVar, NamedTuple

import numpy as np

from d5_plugin_jax._jax import jax as _load_jax
from d5_plugin_jax._jax import x64
from d5core.api import UsageError
from d5core.onnx import NativeOptimizer

__all__ = [
    "FusedStep",
    "JaxAdagrad",
    "JaxAdam",
    "JaxAdamW",
    "JaxMomentum",
    "JaxNesterov",
    "JaxOptimizer",
    "JaxRMSprop",
    "JaxSGD",
]

jax = _load_jax()
jnp = jax.numpy

import optax  # noqa: E402  (after _jax has set XLA up)

#: One parameter's optax state (an ``InjectStatefulHyperparamsState``).
State = Any
#: Where a reference state array lives in the optax chain state: (transformation index,
#: field of its state, the reference's name).
Slot = tuple[int, str, str]


class FusedStep(dict[str, Any]):
    """The gradients :meth:`JaxNativeTraining.native_train_step` returns when its one
    compiled call also computed the bound optimizer's update: it holds no gradient, only
    the update, which :meth:`JaxOptimizer.native_step` commits (the trainer calls it
    only for a finite loss, so a diverged step changes nothing)."""

    def __init__(self, commit: Callable[[], None] | None = None) -> None:
        super().__init__()
        self._commit = commit

    def commit(self) -> None:
        """Write the new parameters and optimizer state (once)."""
        commit, self._commit = self._commit, None
        if commit is not None:
            commit()


def _floating(value: Any) -> str | None:
    dtype = np.dtype(value.dtype)
    return None if dtype.kind == "f" else dtype.name


def _uses_x64(arrays: Sequence[Any]) -> bool:
    return any(np.dtype(a.dtype).itemsize == 8 for a in arrays)


class _SumState(NamedTuple):
    """Adagrad's accumulated squared gradients."""

    sum: Any


def _scale_by_sum_of_squares(initial: float, eps: float) -> Any:
    """``s += g²`` (``s`` starting at ``initial``); ``u = g / (√s + eps)``: the
    reference's Adagrad, ``eps`` outside the root."""

    def init(params: Any) -> _SumState:
        return _SumState(jax.tree.map(lambda p: jnp.full_like(p, initial), params))

    def update(updates: Any, state: _SumState, params: Any = None) -> tuple[Any, _SumState]:
        total = jax.tree.map(lambda s, g: s + g * g, state.sum, updates)
        scaled = jax.tree.map(lambda g, s: g / (jnp.sqrt(s) + eps), updates, total)
        return scaled, _SumState(total)

    return optax.GradientTransformation(init, update)


class JaxOptimizer(NativeOptimizer):
    """A d5 optimizer whose update is an optax chain compiled with ``jax.jit``.

    A subclass gives :meth:`chain` (the transformation for a learning rate, which may be
    a traced scalar) and :meth:`slots` (where the reference's state arrays are in the
    chain's state).
    """

    native: ClassVar[str | None] = "jax"

    def __init__(self, lr: float = 0.01, **hyper: float) -> None:
        super().__init__(lr, **hyper)
        self._tx: Any = None
        self._update: Callable[..., Any] | None = None
        self._states: dict[str, State] = {}
        self._kept: dict[str, tuple[Any, tuple[int, ...]]] = {}
        self._live: MutableMapping[str, Any] | None = None
        self._executor: Any = None

    # -- what a subclass gives -------------------------------------------------

    def chain(self, learning_rate: Any) -> Any:
        """The optax transformation of one step at ``learning_rate``."""
        raise NotImplementedError

    def slots(self) -> tuple[Slot, ...]:
        """The reference's state arrays in the chain's state: ``(index, field, name)``."""
        return ()

    # -- the optax pieces ------------------------------------------------------

    @property
    def transformation(self) -> Any:
        """The chain with its learning rate injected (built once)."""
        if self._tx is None:
            self._tx = optax.inject_hyperparams(self._chain_at)(learning_rate=float(self.lr))
        return self._tx

    def _chain_at(self, learning_rate: Any) -> Any:
        return self.chain(learning_rate)

    def pure_update(
        self,
        params: Mapping[str, Any],
        states: Mapping[str, State],
        grads: Mapping[str, Any],
        lr: Any,
    ) -> tuple[dict[str, Any], dict[str, State]]:
        """The update of ``params`` (by name) from ``grads``, traceable: new parameters
        and states, nothing changed. ``lr`` is a scalar (a Python float or traced)."""
        tx = self.transformation
        new_params: dict[str, Any] = {}
        new_states: dict[str, State] = {}
        for name, p in params.items():
            state = states[name]
            state = state._replace(hyperparams={**state.hyperparams, "learning_rate": lr})
            g = grads[name]
            updates, new_states[name] = tx.update(g, state, p)
            new_params[name] = optax.apply_updates(p, updates)
        return new_params, new_states

    def _compiled(self) -> Callable[..., Any]:
        if self._update is None:
            self._update = jax.jit(self.pure_update, donate_argnums=(0, 1))
        return self._update

    def states_for(self, params: Mapping[str, Any]) -> dict[str, State]:
        """The state of each of ``params`` (jax arrays by name), created on a
        parameter's first step: from a loaded state if there is one, else fresh."""
        states: dict[str, State] = {}
        for name, p in params.items():
            state = self._states.get(name)
            kept = (np.dtype(p.dtype), tuple(p.shape))
            if state is None:
                state = self._create(name, p)
                self._kept[name] = kept
            elif self._kept[name] != kept:
                raise UsageError(
                    f"optimizer {self.name!r}: parameter {name!r} is {kept[0]} {kept[1]}, "
                    f"its state is for {self._kept[name][0]} {self._kept[name][1]}; "
                    "call reset() first"
                )
            states[name] = state
        return states

    def keep(self, states: Mapping[str, State]) -> None:
        """Keep ``states`` (new states by parameter name) as the current ones."""
        self._states.update(states)

    def _create(self, name: str, p: Any) -> State:
        state = self.transformation.init(p)
        loaded = self.state.pop(name, {})
        steps = self.steps.pop(name, 0)
        wanted = self.slots()
        self.check_loaded_state(name, loaded, tuple(s for _, _, s in wanted))
        inner = list(state.inner_state)
        for index, field, slot in wanted:
            if slot not in loaded:
                continue
            value = np.asarray(loaded[slot], dtype=p.dtype)
            if value.shape != tuple(p.shape):
                raise UsageError(
                    f"optimizer {self.name!r}: the loaded {slot!r} of {name!r} has shape "
                    f"{value.shape}, the parameter has {tuple(p.shape)}"
                )
            inner[index] = inner[index]._replace(**{field: jnp.asarray(value)})
        for index, part in enumerate(inner):
            if "count" in getattr(part, "_fields", ()):
                inner[index] = part._replace(count=jnp.asarray(steps, part.count.dtype))
        return state._replace(count=jnp.asarray(steps, state.count.dtype), inner_state=tuple(inner))

    # -- native use ------------------------------------------------------------

    def bind(self, executor: object) -> None:
        """Update ``executor``'s trainable arrays from now on; state taken so far is
        forgotten (state loaded by :meth:`load_state_dict` applies at the next step).

        When ``executor`` can fuse an optimizer into its training step
        (``attach_optimizer``), it is told to: its native_train_step then applies this
        update inside the compiled step."""
        self.native_parameters(
            executor, "jax", "a jax.Array", lambda v: isinstance(v, jax.Array), _floating
        )
        live = executor.native_parameters()  # type: ignore[attr-defined]
        if not isinstance(live, MutableMapping):
            raise UsageError(
                f"optimizer {self.name!r}: {type(executor).__name__}.native_parameters() "
                "must be a mutable mapping (JAX arrays are replaced, not changed in place)"
            )
        self._live, self._executor = live, executor
        self.forget()
        attach = getattr(executor, "attach_optimizer", None)
        if callable(attach):
            attach(self)

    def native_step(self, native_grads: object) -> None:
        """Step the bound parameters with their gradients (jax arrays, numpy arrays or
        ``None`` for zeros): a mapping by name (a parameter left out is left alone) or a
        sequence in bound order. A :class:`FusedStep` was applied already: nothing to do."""
        live = self._live
        if live is None:
            raise UsageError(f"optimizer {self.name!r}: call bind(executor) before native_step")
        if isinstance(native_grads, FusedStep):
            native_grads.commit()
            return
        names, grads = self.native_gradients(native_grads, live)
        params = {n: live[n] for n in names}
        with x64(_uses_x64(list(params.values()))):  # a float64 gradient stays float64
            given = {
                n: self._as_gradient(n, params[n], g) for n, g in zip(names, grads, strict=True)
            }
            new_params = self._run(params, given)
        for name, value in new_params.items():
            live[name] = value

    def _as_gradient(self, name: str, p: Any, grad: Any) -> Any:
        if grad is None:
            return jnp.zeros_like(p)
        if np.shape(grad) != tuple(p.shape):
            raise UsageError(
                f"optimizer {self.name!r}: gradient {name!r} has shape {np.shape(grad)}, "
                f"parameter has {tuple(p.shape)}"
            )
        if isinstance(grad, jax.Array) and grad.dtype == p.dtype:
            return grad
        return jnp.asarray(np.asarray(grad, dtype=p.dtype))

    def _run(self, params: dict[str, Any], grads: dict[str, Any]) -> dict[str, Any]:
        """Run the compiled update; the states are replaced, the new parameters returned.
        The buffers of ``params`` and of the old states are donated: the caller replaces
        the parameters with the new ones."""
        if not params:
            return {}
        with x64(_uses_x64(list(params.values()))):
            states = self.states_for(params)
            new_params, new_states = self._compiled()(params, states, grads, float(self.lr))
        self.keep(new_states)
        return dict(new_params)

    # -- numpy use -------------------------------------------------------------

    def step(self, params: Mapping[str, np.ndarray], grads: Mapping[str, np.ndarray]) -> None:
        """Update numpy ``params`` in place from ``grads``; a parameter without a
        gradient is left alone."""
        if self._live is not None:
            raise UsageError(f"optimizer {self.name!r} is bound to an executor; call native_step")
        checked = list(self.numpy_gradients(params, grads))
        if not checked:
            return
        with x64(_uses_x64([p for _, p, _ in checked])):
            arrays = {n: jnp.asarray(p) for n, p, _ in checked}
            given = {n: jnp.asarray(np.asarray(g, dtype=p.dtype)) for n, p, g in checked}
            new_params = self._run(arrays, given)
        for name, value in new_params.items():
            np.copyto(params[name], np.asarray(value))

    # -- state -----------------------------------------------------------------

    def forget(self) -> None:
        """Drop the optax states (the compiled update stays: it has no state)."""
        self._states, self._kept = {}, {}

    def live_state(self) -> dict[str, tuple[int, dict[str, np.ndarray]]]:
        """Per parameter stepped: its step count and the reference's state arrays."""
        live: dict[str, tuple[int, dict[str, np.ndarray]]] = {}
        wanted = self.slots()
        for name, state in self._states.items():
            arrays = {
                slot: np.array(getattr(state.inner_state[index], field))
                for index, field, slot in wanted
            }
            live[name] = (int(state.count), arrays)
        return live

    def attached_to(self, executor: object) -> bool:
        """Whether :meth:`bind` took ``executor``'s parameters (so it may fuse the
        update into its training step)."""
        return self._executor is executor


class JaxSGD(JaxOptimizer):
    """Plain SGD: ``p -= lr g``."""

    name: ClassVar[str] = "jax-sgd"

    def chain(self, learning_rate: Any) -> Any:
        return optax.scale_by_learning_rate(learning_rate)


class JaxMomentum(JaxOptimizer):
    """Heavy-ball momentum, the reference's form: ``v = m v + g``; ``p -= lr v``."""

    name: ClassVar[str] = "jax-momentum"
    defaults: ClassVar[dict[str, float]] = {"momentum": 0.9}
    nesterov: ClassVar[bool] = False

    def chain(self, learning_rate: Any) -> Any:
        return optax.chain(
            optax.trace(decay=self.hyper["momentum"], nesterov=self.nesterov),
            optax.scale_by_learning_rate(learning_rate),
        )

    def slots(self) -> tuple[Slot, ...]:
        return ((0, "trace", "velocity"),)


class JaxNesterov(JaxMomentum):
    """Nesterov momentum, the reference's form: ``v = m v + g``; ``p -= lr (g + m v)``."""

    name: ClassVar[str] = "jax-nesterov"
    nesterov: ClassVar[bool] = True


class JaxAdam(JaxOptimizer):
    """Adam with both bias corrections and ``eps`` outside the corrected root."""

    name: ClassVar[str] = "jax-adam"
    defaults: ClassVar[dict[str, float]] = {"beta1": 0.9, "beta2": 0.999, "eps": 1e-8}

    def __init__(self, lr: float = 1e-3, **hyper: float) -> None:
        super().__init__(lr, **hyper)

    def _adam(self) -> Any:
        h = self.hyper
        return optax.scale_by_adam(b1=h["beta1"], b2=h["beta2"], eps=h["eps"])

    def chain(self, learning_rate: Any) -> Any:
        return optax.chain(self._adam(), optax.scale_by_learning_rate(learning_rate))

    def slots(self) -> tuple[Slot, ...]:
        return ((0, "mu", "exp_avg"), (0, "nu", "exp_avg_sq"))


class JaxAdamW(JaxAdam):
    """Adam with decoupled weight decay (the reference's ``p *= 1 - lr wd`` first)."""

    name: ClassVar[str] = "jax-adamw"
    defaults: ClassVar[dict[str, float]] = {**JaxAdam.defaults, "weight_decay": 0.01}

    def chain(self, learning_rate: Any) -> Any:
        return optax.chain(
            self._adam(),
            optax.add_decayed_weights(self.hyper["weight_decay"]),
            optax.scale_by_learning_rate(learning_rate),
        )


class JaxAdagrad(JaxOptimizer):
    """Adagrad: ``s += g²`` (from ``initial_accumulator``); ``p -= lr g / (√s + eps)``."""

    name: ClassVar[str] = "jax-adagrad"
    defaults: ClassVar[dict[str, float]] = {"eps": 1e-10, "initial_accumulator": 0.0}

    def chain(self, learning_rate: Any) -> Any:
        h = self.hyper
        return optax.chain(
            _scale_by_sum_of_squares(float(h["initial_accumulator"]), h["eps"]),
            optax.scale_by_learning_rate(learning_rate),
        )

    def slots(self) -> tuple[Slot, ...]:
        return ((0, "sum", "sum"),)


class JaxRMSprop(JaxOptimizer):
    """RMSprop, the reference's form: ``eps`` outside the root, optional centering and
    momentum (the buffer accumulates ``g / d``; ``lr`` applies when stepping)."""

    name: ClassVar[str] = "jax-rmsprop"
    defaults: ClassVar[dict[str, float]] = {
        "alpha": 0.99,
        "eps": 1e-8,
        "momentum": 0.0,
        "centered": False,
    }

    def chain(self, learning_rate: Any) -> Any:
        h = self.hyper
        scale = optax.scale_by_stddev if h["centered"] else optax.scale_by_rms
        parts = [scale(decay=h["alpha"], eps=h["eps"], initial_scale=0.0, eps_in_sqrt=False)]
        if h["momentum"] > 0:
            parts.append(optax.trace(decay=h["momentum"]))
        parts.append(optax.scale_by_learning_rate(learning_rate))
        return optax.chain(*parts)

    def slots(self) -> tuple[Slot, ...]:
        found: list[Slot] = [(0, "nu", "square_avg")]
        if self.hyper["centered"]:
            found.append((0, "mu", "grad_avg"))
        if self.hyper["momentum"] > 0:
            found.append((1, "trace", "momentum_buffer"))
        return tuple(found)
