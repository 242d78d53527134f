"""Transformations of networks (graph passes) and of the training step (microbatching).

A :class:`GraphPass` rewrites a :class:`Network` into a new one; passes are found by name
in :func:`graph_passes`, which merges the built-in ones with those plugins contribute
through the ``d5_graph_passes`` hook.

Microbatching is a transformation of the *training step*, not of the graph: one step on a
batch of ``B`` samples becomes ``k`` forward-and-backward passes on microbatches of
``b_1 + ... + b_k = B`` samples whose gradients are summed with weights ``b_i / B``. For
a loss that is a mean over the samples this equals the unsplit step (up to rounding),
while the peak memory of activations shrinks about ``k`` times.

Caveat: operators that mix samples break the equality. BatchNormalization in training
mode normalizes each microbatch with its own statistics (the numpy and torch executors
train it that way), so a network with it computes a different, though usually close,
step. Models without it (an MLP, LeNet-5) are exact.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from d5core.errors import UsageError
from d5core.onnx.network import Network

if TYPE_CHECKING:
    from d5core.levels.networks import GraphExecutor

__all__ = [
    "PASSES",
    "GraphPass",
    "InferShapes",
    "apply_pass",
    "graph_passes",
    "microbatched_step",
    "split_batch",
]


class GraphPass(ABC):
    """A transformation of a network; it returns a new network and leaves its argument
    unchanged. Options are constructor keyword arguments."""

    #: The name the pass is selected by.
    name: ClassVar[str] = ""

    @abstractmethod
    def apply(self, network: Network) -> Network:
        """Return the transformed network."""


class InferShapes(GraphPass):
    """Record the shapes of every intermediate tensor (``value_info``) in the graph."""

    name = "infer_shapes"

    def __init__(self, *, strict: bool = False) -> None:
        self.strict = strict

    def apply(self, network: Network) -> Network:
        return network.infer_shapes(strict=self.strict)


#: Built-in passes: name to factory (a :class:`GraphPass` subclass, called with options).
PASSES: dict[str, Callable[..., GraphPass]] = {InferShapes.name: InferShapes}


def graph_passes() -> dict[str, Callable[..., Any]]:
    """Every pass, from the ``d5_graph_passes`` hook: :data:`PASSES` comes from d5's
    internal ``builtins`` plugin and is kept on a name a plugin offers too; the clash is
    reported."""
    from d5core.plugins import get_plugin_manager

    return get_plugin_manager().merged("d5_graph_passes")


def apply_pass(network: Network, name: str, **options: Any) -> Network:
    """Apply the pass ``name`` with ``options`` to ``network``.

    A plugin's factory may build a :class:`GraphPass`, or be a plain function
    ``(ModelProto, **options) -> ModelProto`` as the hook's documentation allows.
    """
    passes = graph_passes()
    if name not in passes:
        raise UsageError(f"unknown graph pass {name!r}; choose one of {', '.join(sorted(passes))}")
    factory = passes[name]
    made: Any = (
        factory(**options) if isinstance(factory, type) else factory(network.model, **options)
    )
    if isinstance(made, GraphPass):
        return made.apply(network)
    if isinstance(made, Network):
        return made
    return Network(made, source=f"the result of pass {name!r}")


# -- microbatching ---------------------------------------------------------------------


def _batch_size(feeds: Mapping[str, np.ndarray], names: Iterable[str]) -> int:
    sizes = {name: int(np.shape(feeds[name])[0]) for name in names}
    distinct = set(sizes.values())
    if len(distinct) != 1:
        listing = ", ".join(f"{n}: {s}" for n, s in sorted(sizes.items()))
        raise UsageError(
            f"batch inputs disagree on the batch size ({listing}); pass batch_inputs= "
            f"naming the inputs that have a batch dimension"
        )
    return distinct.pop()


def split_batch(
    feeds: Mapping[str, np.ndarray], k: int, batch_inputs: Iterable[str] | None = None
) -> list[dict[str, np.ndarray]]:
    """Split ``feeds`` into ``k`` microbatches along the first axis.

    :param batch_inputs: the feeds that have a batch dimension; by default every feed
        with at least one dimension. Other feeds go whole into every microbatch.
    :return: ``k`` feed dicts; sizes differ by at most one (``numpy.array_split``).
    """
    names = (
        [n for n in feeds if np.ndim(feeds[n]) >= 1] if batch_inputs is None else list(batch_inputs)
    )
    missing = [n for n in names if n not in feeds]
    if missing:
        raise UsageError(f"batch input {missing[0]!r} is not among the feeds {sorted(feeds)}")
    if not names:
        raise UsageError("no feed has a batch dimension to split; pass batch_inputs=")
    batch = _batch_size(feeds, names)
    if not isinstance(k, int | np.integer) or k < 1 or k > batch:
        raise UsageError(f"microbatches must be between 1 and the batch size {batch}, not {k}")
    pieces = {n: np.array_split(np.asarray(feeds[n]), int(k)) for n in names}
    return [{n: (pieces[n][i] if n in pieces else feeds[n]) for n in feeds} for i in range(int(k))]


def microbatched_step(
    executor: GraphExecutor,
    feeds: Mapping[str, np.ndarray],
    loss: str,
    k: int,
    *,
    batch_inputs: Iterable[str] | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """One training step of ``executor`` run as ``k`` microbatches.

    Each microbatch goes through ``executor.inference_and_backprop``; gradients and the
    loss are summed with weights ``b_i / B``, which equals the unsplit step for a loss
    that is a mean over samples. Outputs whose first axis is the microbatch's size are
    concatenated; other outputs (scalars) are averaged with the same weights.

    :return: ``(outputs, gradients)`` as ``inference_and_backprop`` returns them.
    """
    micro = split_batch(feeds, k, batch_inputs)
    names = (
        [n for n in feeds if np.ndim(feeds[n]) >= 1] if batch_inputs is None else list(batch_inputs)
    )
    total = _batch_size(feeds, names)
    sizes = [int(np.shape(m[names[0]])[0]) for m in micro]
    grads: dict[str, np.ndarray] = {}
    parts: dict[str, list[np.ndarray]] = {}
    for size, mb in zip(sizes, micro, strict=True):
        outputs, g = executor.inference_and_backprop(mb, loss)
        weight = size / total
        for name, value in g.items():
            value = np.asarray(value)
            scaled = value * np.asarray(weight, dtype=value.dtype)
            grads[name] = scaled if name not in grads else grads[name] + scaled
        for name, value in outputs.items():
            parts.setdefault(name, []).append(np.asarray(value))
    merged: dict[str, np.ndarray] = {}
    for name, values in parts.items():
        batched = name != loss and all(
            v.ndim >= 1 and v.shape[0] == s for v, s in zip(values, sizes, strict=True)
        )
        if batched:
            merged[name] = np.concatenate(values, axis=0)
        else:
            dtype = values[0].dtype
            merged[name] = np.asarray(
                sum(v * (s / total) for v, s in zip(values, sizes, strict=True)), dtype=dtype
            )
    return merged, grads
