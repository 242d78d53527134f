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

A Gemm weight read after a Flatten of a channels-last activation is kept with its
``C*H*W`` axis in ``H*W*C`` order (:func:`flat_weight_layout`), so that the Flatten needs
no transpose back to ONNX's layout. :class:`VariableLayout` says how any parameter's
variable is laid out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from d5_plugin_tensorflow._tf import tensorflow

__all__ = [
    "VariableLayout",
    "cl_axis",
    "flat_weight_layout",
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


@dataclass(frozen=True)
class VariableLayout:
    """How a parameter's variable holds its value.

    Without ``view``, the variable is the ONNX value transposed by ``perm`` (a
    convolution kernel: ``VariableLayout((2, 3, 1, 0))``). With ``view``, the ONNX value
    is seen with the shape ``view``, transposed by ``perm`` and flattened back to its own
    shape: a Gemm weight ``(M, C*H*W)`` read after a channels-last Flatten is seen as
    ``(M, C, H, W)``, moved to ``(M, H, W, C)`` and kept as ``(M, H*W*C)``.
    """

    perm: tuple[int, ...]
    view: tuple[int, ...] | None = None

    def to_native(self, value: np.ndarray) -> np.ndarray:
        """An ONNX-layout value in the variable's layout (a new contiguous array)."""
        a = np.asarray(value)
        if self.view is None:
            return np.ascontiguousarray(np.transpose(a, self.perm))
        moved = np.transpose(a.reshape(self.view), self.perm)
        return np.ascontiguousarray(moved).reshape(a.shape)

    def to_onnx(self, value: np.ndarray) -> np.ndarray:
        """A value in the variable's layout back in ONNX's layout."""
        a = np.asarray(value)
        back = np.argsort(self.perm)
        if self.view is None:
            return np.ascontiguousarray(np.transpose(a, back))
        moved = a.reshape(tuple(self.view[p] for p in self.perm))
        return np.ascontiguousarray(np.transpose(moved, back)).reshape(a.shape)


def flat_weight_layout(
    channels: int, spatial: tuple[int, ...], outputs: int, trans_b: bool
) -> VariableLayout:
    """The layout of a Gemm weight whose input A is the Flatten of a channels-last
    activation with ``channels`` channels and ``spatial`` size: its ``C*prod(spatial)``
    axis kept in ``prod(spatial)*C`` order.

    :param outputs: the Gemm's N (columns of its output).
    :param trans_b: the Gemm's ``transB``: the weight is ``(N, K)`` when set, else
        ``(K, N)``.
    """
    n = len(spatial)
    if trans_b:
        return VariableLayout((0, *range(2, n + 2), 1), (outputs, channels, *spatial))
    return VariableLayout((*range(1, n + 1), 0, n + 1), (channels, *spatial, outputs))


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
