"""The native training path of the JAX executor (level 2): :class:`JaxNativeTraining`.

The trainer's native path (docs/training.md) runs, per step, ``to_native``,
``native_train_step``, one read of the loss and, when it is finite,
``optimizer.native_step(grads)`` and ``apply_running_stats()``. JAX arrays are
immutable, so "updating a parameter in place" means writing a new array into the
executor's :attr:`params` dict; :meth:`JaxNativeTraining.native_parameters` is a
mutable view of the trainable entries of that dict, which a ``jax-*`` optimizer binds
to.

The whole step compiled as one call. When a ``jax-*`` optimizer
(:class:`~d5_plugin_jax.optimizers.JaxOptimizer`) has been bound to the executor,
:meth:`~JaxNativeTraining.native_train_step` runs forward, backward and the optax
update as one ``jax.jit`` function ``(params, states, other, feeds, lr) -> (outputs,
new_params, new_states, stats)``. The gradients returned are a
:class:`~d5_plugin_jax.optimizers.FusedStep` holding the new parameters and states,
which the optimizer's ``native_step`` commits into :attr:`params`. The trainer calls
``native_step`` only when the loss is finite, so a diverged step changes nothing, with
no test of the loss inside the compiled step. The buffers are not donated: the old
parameters must survive a step that is not committed, and an in-graph guard or donation
made the step compile 0.3-0.6 s slower here, which a seconds-long training pays in its
time to accuracy. With another optimizer (or none bound), ``native_train_step`` returns
the gradients and the optimizer applies them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any

import numpy as np

from d5_plugin_jax._jax import PENDING
from d5_plugin_jax._jax import jax as _load_jax

__all__ = ["JaxCorrectCounter", "JaxNativeTraining", "LiveParameters"]

#: Logit elements a counter holds at most before it counts them (16 MiB of float32).
_HELD_ELEMENTS = 1 << 22


class LiveParameters(MutableMapping[str, Any]):
    """The trainable entries of an executor's parameter dict, in trainable order:
    setting one replaces the array the executor computes with (no copy)."""

    __slots__ = ("_names", "_params")

    def __init__(self, params: dict[str, Any], names: list[str]) -> None:
        self._params, self._names = params, names

    def __getitem__(self, name: str) -> Any:
        if name not in self._names:
            raise KeyError(name)
        return self._params[name]

    def __setitem__(self, name: str, value: Any) -> None:
        if name not in self._names:
            raise KeyError(name)
        self._params[name] = value

    def __delitem__(self, name: str) -> None:
        raise TypeError("the executor's parameters cannot be deleted")

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


class _NativeFeeds(dict[str, Any]):
    """Feeds from :meth:`JaxNativeTraining.to_native`: by input name, JAX arrays (a feed
    read while tracing stays as given), with :attr:`dynamic`, the arrays the compiled
    function takes, so that a step does not check and convert them again."""

    dynamic: dict[str, Any]


class JaxCorrectCounter:
    """Counts correct predictions of training batches with one read per :meth:`take`.

    :meth:`add` keeps the batch's logits and labels (JAX arrays are immutable: keeping
    them costs nothing and runs nothing) and counts what it holds in numpy when
    :meth:`take` is called or when it holds more than ``_HELD_ELEMENTS`` logits. A step
    so pays no dispatch for its count. numpy's argmax takes a NaN as the largest logit,
    as the reference does.
    """

    __slots__ = ("_count", "_held", "_size")

    def __init__(self) -> None:
        self._held: list[tuple[Any, Any]] = []
        self._size = 0
        self._count = 0

    def add(self, logits: Any, labels: Any) -> None:
        """Keep the batch; it is counted later."""
        self._held.append((logits, labels))
        self._size += int(np.prod(np.shape(logits)))
        if self._size >= _HELD_ELEMENTS:
            self._flush()

    def _flush(self) -> None:
        for logits, labels in self._held:
            scores = np.asarray(logits)
            if scores.dtype.kind not in "fiub":  # bfloat16: float32 holds it exactly
                scores = scores.astype(np.float32)
            self._count += int(np.count_nonzero(np.argmax(scores, -1) == np.asarray(labels)))
        self._held, self._size = [], 0

    def take(self) -> int:
        """The count of everything added since the last take; resets."""
        self._flush()
        count, self._count = self._count, 0
        return count


class JaxNativeTraining:
    """The methods of :class:`d5core.api.NativeTraining` for
    :class:`~d5_plugin_jax.executor.JaxExecutor`, which provides :attr:`params`,
    :attr:`grad_names` (the trainable parameters that get a gradient), the pure
    ``train_function`` and its conversions of feeds."""

    if TYPE_CHECKING:
        params: dict[str, Any]
        grad_names: list[str]
        running_stats: dict[str, Any]

        def _to_arrays(self, feeds: Mapping[str, Any]) -> dict[str, Any]: ...
        def _static_key(self, feeds: Mapping[str, Any]) -> tuple[Any, ...]: ...
        def _call(self, fn: Any, *args: Any) -> Any: ...
        def _keep_stats(self, stats: Mapping[str, Any]) -> None: ...
        def train_function(self, loss: str, key: tuple[Any, ...] = ()) -> Any: ...
        def run_train_step(self, feeds: Mapping[str, Any], loss: str) -> tuple[Any, Any]: ...

    #: The ``jax-*`` optimizer whose update the training step includes, if any.
    _fused_optimizer: Any = None
    #: The compiled whole steps, by (optimizer id, program id, loss, static feeds).
    _fused_steps: dict[tuple[Any, ...], Any] | None = None

    def to_native(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        """``feeds`` as JAX arrays, converted once (JAX arrays pass through); a feed
        read while tracing (a shape) stays a numpy array.

        :raises UsageError: when a graph input is missing.
        """
        arrays = self._to_arrays(feeds)
        native = _NativeFeeds(
            {k: arrays[k] if k in arrays else np.asarray(v) for k, v in feeds.items()}
        )
        native.dynamic = arrays
        return native

    def native_parameters(self) -> LiveParameters:
        """The trainable parameters that get a gradient, by name in trainable order, as
        a live view of :attr:`params`: assigning a new array changes the network."""
        return LiveParameters(self.params, self.grad_names)

    def attach_optimizer(self, optimizer: Any) -> None:
        """Include ``optimizer``'s update in :meth:`native_train_step` (a ``jax-*``
        optimizer calls this when it binds to the executor)."""
        self._fused_optimizer = optimizer

    def _fusing(self) -> Any:
        opt = self._fused_optimizer
        if opt is None or not opt.attached_to(self):
            return None
        return opt

    def native_train_step(
        self, feeds: Mapping[str, Any], loss: str
    ) -> tuple[dict[str, Any], Mapping[str, Any]]:
        """:meth:`inference_and_backprop` in JAX arrays, or, with a bound ``jax-*``
        optimizer, the whole training step (see the module docstring).

        :param feeds: arrays from :meth:`to_native` (or numpy arrays) by input name.
        :param loss: the name of the loss output.
        :return: every graph output as a JAX array, and the gradient of each trainable
            parameter of :meth:`native_parameters` (zeros where the loss does not depend
            on it), or the :class:`~d5_plugin_jax.optimizers.FusedStep` marker when
            the update was applied. Running statistics are kept for
            :meth:`apply_running_stats`.
        """
        opt = self._fusing()
        if opt is None:
            outputs, grads = self.run_train_step(feeds, loss)
            return dict(outputs), {n: grads[n] for n in self.grad_names}
        return self._fused_step(opt, feeds, loss)

    def _fused_step(
        self, opt: Any, feeds: Mapping[str, Any], loss: str
    ) -> tuple[dict[str, Any], Mapping[str, Any]]:
        from d5_plugin_jax.optimizers import FusedStep

        # feeds from to_native were checked and converted there
        arrays = feeds.dynamic if isinstance(feeds, _NativeFeeds) else self._to_arrays(feeds)
        key = self._static_key(feeds)
        fn = self._fused_function(opt, loss, key)
        names = self.grad_names
        trained = {n: self.params[n] for n in names}
        others = {k: v for k, v in self.params.items() if k not in trained}

        def run() -> Any:
            states = opt.states_for(trained)
            return fn(trained, states, others, arrays, float(opt.lr))

        outputs, new_params, new_states, stats = self._call(run)
        self._keep_stats(stats)
        PENDING[0] = outputs

        def commit() -> None:
            self.params.update(new_params)
            opt.keep(new_states)

        return dict(outputs), FusedStep(commit)

    def _fused_function(self, opt: Any, loss: str, key: tuple[Any, ...]) -> Any:
        """The compiled whole step for ``opt``, ``loss`` and the static feeds ``key``."""
        cache = self._fused_steps
        if cache is None:
            cache = self._fused_steps = {}
        # a new program (a static parameter changed) or optimizer compiles anew
        program = getattr(self, "program", None)
        index = (id(opt), id(program), loss, key)
        found = cache.get(index)
        if found is not None:
            return found
        jax = _load_jax()
        jnp = jax.numpy
        train = self.train_function(loss, key)
        update = opt.pure_update

        def step(
            trained: dict[str, Any],
            states: dict[str, Any],
            others: dict[str, Any],
            feeds: dict[str, Any],
            lr: Any,
        ) -> Any:
            outputs, grads, stats = train({**others, **trained}, feeds)
            new_params, new_states = update(trained, states, grads, lr)
            # the types the step was given (a state the learning rate wrote would come
            # back weakly typed): the next step then runs this compilation again
            new_params, new_states = jax.tree.map(
                lambda new, old: jnp.asarray(new, dtype=old.dtype),
                (new_params, new_states),
                (trained, states),
            )
            return outputs, new_params, new_states, stats

        for stale in [k for k in cache if k[:2] != index[:2]]:
            del cache[stale]
        found = cache[index] = jax.jit(step)
        return found

    def native_correct_counter(self) -> JaxCorrectCounter:
        """A counter of correct predictions read once per epoch
        (:class:`JaxCorrectCounter`)."""
        return JaxCorrectCounter()

    def apply_running_stats(self) -> None:
        """Write the running statistics of the last training pass into :attr:`params`."""
        for name, value in self.running_stats.items():
            self.params[name] = value
