"""What the framework-native optimizers share, apart from their framework.

A framework plugin's optimizer (a :class:`~d5core.api.Optimizer` with ``native`` set)
steps numpy parameters through :meth:`~d5core.api.Optimizer.step`, or the executor's live
tensors through ``bind`` and ``native_step``. The checks of what it is given, and the
numpy reference's layout of its saved state, are the same whatever the framework: these
helpers hold them, with the messages users see, so that the plugins keep only what calls
their framework: a plugin's optimizer subclasses :class:`NativeOptimizer`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from d5core.api import Optimizer, UsageError

__all__ = ["NativeOptimizer"]


class NativeOptimizer(Optimizer):
    """A framework-native optimizer: the checks of what it is given, and its state in
    the numpy reference's layout.

    A subclass whose framework holds the state of the parameters it stepped gives it
    by :meth:`live_state` and drops it in :meth:`forget`; the base class's
    :attr:`state` and :attr:`steps` hold state loaded and not yet applied (it waits
    there until its parameter's next step), and :meth:`state_dict`,
    :meth:`load_state_dict` and :meth:`reset` combine the two. A subclass that saves
    its framework's own state overrides those three.
    """

    # -- what a subclass gives ---------------------------------------------------

    def live_state(self) -> Mapping[str, tuple[int, dict[str, np.ndarray]]]:
        """The step count and state arrays (numpy copies, in the reference's layout)
        of each parameter whose state the framework holds."""
        return {}

    def forget(self) -> None:
        """Drop the state the framework holds."""

    # -- checks ----------------------------------------------------------------------

    def native_parameters(
        self,
        executor: object,
        framework: str,
        kind: str,
        is_native: Callable[[Any], bool],
        not_floating: Callable[[Any], str | None],
    ) -> dict[str, Any]:
        """The live trainable tensors of ``executor`` (its ``native_parameters()``), by
        name in its trainable order, to bind to.

        :param framework: names the executor in messages (``"tensorflow"``).
        :param kind: names the framework's tensor in messages (``"a tf.Variable"``).
        :param is_native: whether a value is such a tensor.
        :param not_floating: ``None`` for a floating-point tensor, else the name of its
            element type.
        :raises UsageError: one line, for an executor without ``native_parameters``, a
            value that is not the framework's tensor, or one that is not floating-point.
        """
        accessor = getattr(executor, "native_parameters", None)
        if not callable(accessor):
            raise UsageError(
                f"optimizer {self.name!r} binds to the {framework} executor only "
                f"({type(executor).__name__} has no native_parameters); use step() with "
                "numpy arrays otherwise"
            )
        found = dict(accessor())
        for key, value in found.items():
            if not is_native(value):
                raise UsageError(
                    f"optimizer {self.name!r}: parameter {key!r} of "
                    f"{type(executor).__name__} is a {type(value).__name__}, not {kind}; "
                    f"bind to the {framework} executor"
                )
            dtype = not_floating(value)
            if dtype is not None:
                raise UsageError(
                    f"optimizer {self.name!r}: parameter {key!r} is {dtype}; only "
                    "floating-point parameters can be trained"
                )
        return found

    def native_gradients(
        self, native_grads: object, bound: Mapping[str, Any]
    ) -> tuple[tuple[str, ...], list[Any]]:
        """The names and gradients ``native_step`` was given, in the order of ``bound``
        (the bound tensors by name): a mapping by name (a parameter left out is left
        alone) or a sequence with one gradient per bound tensor.

        :raises UsageError: one line, for a gradient of no bound parameter, a sequence
            of another length, or neither a mapping nor a sequence.
        """
        if isinstance(native_grads, Mapping):
            for key in native_grads:
                if key not in bound:
                    raise UsageError(f"optimizer {self.name!r}: gradient {key!r} has no parameter")
            if len(native_grads) == len(bound):
                names = tuple(bound)
            else:
                names = tuple(n for n in bound if n in native_grads)
            return names, [native_grads[n] for n in names]
        if isinstance(native_grads, Sequence) and not isinstance(native_grads, str):
            if len(native_grads) != len(bound):
                raise UsageError(
                    f"optimizer {self.name!r}: {len(native_grads)} gradients for "
                    f"{len(bound)} bound parameters"
                )
            return tuple(bound), list(native_grads)
        raise UsageError(
            f"optimizer {self.name!r}: native gradients must be a mapping or a sequence"
        )

    def numpy_gradients(
        self, params: Mapping[str, np.ndarray], grads: Mapping[str, Any]
    ) -> Iterator[tuple[str, np.ndarray, Any]]:
        """Each gradient that :meth:`step` was given, as ``(name, parameter,
        gradient)``, checked as it comes: its parameter exists and has its shape.

        :raises UsageError: one line, for a gradient of no parameter or of another shape.
        """
        for name, grad in grads.items():
            if name not in params:
                raise UsageError(f"optimizer {self.name!r}: gradient {name!r} has no parameter")
            p = params[name]
            if np.shape(grad) != p.shape:
                raise UsageError(
                    f"optimizer {self.name!r}: gradient {name!r} has shape {np.shape(grad)}, "
                    f"parameter has {p.shape}"
                )
            yield name, p, grad

    def check_state_layout(
        self, name: str, param: np.ndarray, dtype: Any, shape: Sequence[int]
    ) -> None:
        """Check that the numpy parameter ``name`` still has the ``dtype`` and ``shape``
        of the copy whose state the optimizer keeps.

        :raises UsageError: one line that asks for ``reset()``.
        """
        kept, kept_shape = np.dtype(dtype), tuple(int(d) for d in shape)
        if kept_shape != param.shape or kept != param.dtype:
            raise UsageError(
                f"optimizer {self.name!r}: parameter {name!r} is {param.dtype} "
                f"{param.shape}, its state is for {kept} {kept_shape}; call reset() first"
            )

    def check_loaded_state(self, name: str, loaded: Mapping[str, Any], kept: Sequence[str]) -> None:
        """Check that the state loaded for parameter ``name`` holds only what the
        optimizer keeps (``kept``, the numpy reference's state names).

        :raises UsageError: one line naming the first state it does not keep.
        """
        extra = sorted(set(loaded) - set(kept))
        if extra:
            raise UsageError(
                f"optimizer {self.name!r}: the loaded state of {name!r} holds {extra[0]!r}, "
                f"which this optimizer does not keep (it keeps {', '.join(kept) or 'nothing'})"
            )

    # -- state -----------------------------------------------------------------------

    def state_dict(self) -> dict[str, object]:
        """``lr``, ``hyper``, and per parameter its step count and state arrays
        (copies), in the numpy reference's layout: :meth:`live_state`, and the state
        loaded and not yet applied."""
        steps = dict(self.steps)
        state = {k: {s: a.copy() for s, a in v.items()} for k, v in self.state.items()}
        for name, (count, arrays) in self.live_state().items():
            steps[name] = count
            state[name] = arrays
        return {
            "name": self.name,
            "lr": self.lr,
            "hyper": dict(self.hyper),
            "steps": steps,
            "state": state,
        }

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        """Resume from :meth:`state_dict` (this class's or the numpy reference's
        layout); each parameter's state applies at its next step."""
        super().load_state_dict(state)
        self.forget()

    def reset(self) -> None:
        """Forget all state, as if no step had been taken."""
        super().reset()
        self.forget()
