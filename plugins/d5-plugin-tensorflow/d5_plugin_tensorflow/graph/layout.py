"""The channels-last layout TensorFlow's CPU convolution and pooling kernels want.

ONNX lays activations out ``(N, C, *spatial)``; TensorFlow's CPU kernels for
convolution and pooling take ``(N, *spatial, C)`` only. The executor keeps a
channels-last copy of each activation that a convolution or pooling node produced, and
nodes that do not care about the layout (element-wise ones, BatchNormalization, LRN,
Concat, global pooling) work on that copy too, so that a chain of such nodes runs with
no transpose between them. These functions move tensors between the two layouts; a
move that only shifts axes of size 1 (one channel, a 1x1 spatial map) is a reshape,
which costs no copy.

Convolution kernels have a TensorFlow layout too: ONNX's ``(M, C/group, *k)`` (and
ConvTranspose's ``(C, M/group, *k)``) is ``(*k, C/group, M)`` (``(*k, M/group, C)``) for
TensorFlow; :func:`kernel_perm` and :func:`onnx_kernel_perm` move them, on the host,
where the executor keeps its variables in TensorFlow's layout.
"""

from __future__ import annotations

from typing import Any

from d5_plugin_tensorflow._tf import tensorflow

__all__ = [
    "cl_axis",
    "from_channels_last",
    "kernel_perm",
    "onnx_kernel_perm",
    "to_channels_last",
    "to_cl_perm",
    "to_onnx_perm",
]

tf = tensorflow()


def to_cl_perm(rank: int) -> list[int]:
    """The permutation taking ``(N, C, *spatial)`` to ``(N, *spatial, C)``."""
    return [0, *range(2, rank), 1]


def to_onnx_perm(rank: int) -> list[int]:
    """The permutation taking ``(N, *spatial, C)`` back to ``(N, C, *spatial)``."""
    return [0, rank - 1, *range(1, rank - 1)]


def kernel_perm(rank: int) -> list[int]:
    """The permutation taking an ONNX kernel ``(O, I, *k)`` to TensorFlow's ``(*k, I, O)``."""
    return [*range(2, rank), 1, 0]


def onnx_kernel_perm(rank: int) -> list[int]:
    """The permutation taking a TensorFlow kernel ``(*k, I, O)`` back to ``(O, I, *k)``."""
    return [rank - 1, rank - 2, *range(rank - 2)]


def _move(x: Any, perm: list[int]) -> Any:
    """``tf.transpose(x, perm)``, as a reshape when only axes of size 1 move (the other
    axes keep their order, so the data does not move)."""
    shape = x.shape.as_list()
    if None not in shape:
        kept = [a for a in perm if shape[a] != 1]
        if kept == sorted(kept):
            return tf.reshape(x, [shape[a] for a in perm])
    return tf.transpose(x, perm)


def cl_axis(axis: int, rank: int) -> int:
    """Where ONNX axis ``axis`` (possibly negative) lies in the channels-last layout."""
    return to_cl_perm(rank).index(axis % rank)


def to_channels_last(x: Any, rank: int) -> Any:
    """``x`` in the channels-last layout of a ``rank``-D activation.

    A tensor of lower rank (a bias of shape ``(C, 1, 1)``, a scalar) is first given
    leading axes of size 1, as broadcasting would, so that it broadcasts against the
    channels-last activation as it did against the ONNX one.
    """
    shape = x.shape.as_list()
    if len(shape) < rank:
        x = tf.reshape(x, [1] * (rank - len(shape)) + shape)
    return _move(x, to_cl_perm(rank))


def from_channels_last(y: Any) -> Any:
    """A channels-last tensor back in the ONNX layout."""
    return _move(y, to_onnx_perm(len(y.shape)))
