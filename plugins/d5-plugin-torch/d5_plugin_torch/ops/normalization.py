"""``BatchNormalization``, ``LayerNormalization`` and ``Dropout`` (with the reference's
Dropout mask)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor as T

from d5_plugin_torch.ops._base import Kernel, Signature, TorchOperator
from d5core.onnx import (
    BatchNormalizationRules,
    DropoutRules,
    LayerNormalizationRules,
    reference_mask,
)

__all__ = ["BatchNormalization", "Dropout", "LayerNormalization", "reference_mask"]


class BatchNormalization(BatchNormalizationRules, TorchOperator):
    """ONNX ``BatchNormalization`` (opset 15).

    Inference mode normalizes with ``input_mean`` and ``input_var`` by
    ``torch.batch_norm``. Training mode normalizes with the batch's mean and (biased)
    variance and also returns ``running = input * momentum + batch * (1 - momentum)`` for
    both statistics (torch's own update would use the unbiased variance); its forward is
    ``torch.var_mean`` then ``torch.batch_norm`` on those statistics, and its
    differentiated graph uses ``torch.batch_norm`` in training mode, so the gradients of
    the running outputs flow to ``X`` and the statistics inputs as well. torch's
    batch-norm kernel has no derivative for the statistics inputs, so the differentiated
    graph of inference mode is the expression ``(X - mean) * scale / sqrt(var + eps) + B``.
    """

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        shape = sig.shapes[0]
        assert shape is not None
        eps, momentum, keep = self.epsilon, self.momentum, 1.0 - self.momentum
        # torch.batch_norm is what F.batch_norm calls, less F's refusal of a training
        # batch with one value per channel (ONNX normalizes it to B).
        batch_norm, var_mean = torch.batch_norm, torch.var_mean
        cudnn = torch.backends.cudnn.enabled
        axes = (0, *range(2, len(shape)))
        if self.training and for_grad:

            def train_graph(x: T, s: T, b: T, mu: T, var: T) -> tuple[T, ...]:
                y = batch_norm(x, s, b, None, None, True, 0.0, eps, cudnn)
                v, m = var_mean(x, axes, correction=0)
                return y, mu * momentum + m * keep, var * momentum + v * keep

            return train_graph
        if self.training:

            def train(x: T, s: T, b: T, mu: T, var: T) -> tuple[T, ...]:
                v, m = var_mean(x, axes, correction=0)
                y = batch_norm(x, s, b, m, v, False, 0.0, eps, cudnn)
                return y, mu * momentum + m * keep, var * momentum + v * keep

            return train
        if for_grad:
            channel = (1, shape[1]) + (1,) * (len(shape) - 2)
            rsqrt = torch.rsqrt

            def infer_graph(x: T, s: T, b: T, mu: T, var: T) -> tuple[T]:
                factor = (s * rsqrt(var + eps)).reshape(channel)
                return ((x - mu.reshape(channel)) * factor + b.reshape(channel),)

            return infer_graph

        def infer(x: T, s: T, b: T, mu: T, var: T) -> tuple[T]:
            return (batch_norm(x, s, b, mu, var, False, 0.0, eps, cudnn),)

        return infer


class LayerNormalization(LayerNormalizationRules, TorchOperator):
    """ONNX ``LayerNormalization`` (opset 17): ``X`` normalized over the axes from
    ``axis`` on, times ``Scale``, plus ``B``; also the ``Mean`` and ``InvStdDev`` of
    each normalized slice (shape ``X[:axis]`` then ones), all in the type of ``X``
    (``stash_type`` is read but torch computes in that type).

    The forward is one ``torch.native_layer_norm``, which returns all three outputs.
    Torch gives its ``Mean`` and ``InvStdDev`` outputs no gradient, so the differentiated
    graph takes ``Y`` from ``F.layer_norm`` and the statistics from ``torch.var_mean``
    and ``torch.rsqrt``: gradients given for them reach ``X`` as the ONNX definition
    says. ``Scale`` and ``B`` may be of the normalized shape or broadcast to it; a
    broadcast one is applied after the normalization.
    """

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        dims = self._normalized(sig)
        x_shape = sig.shapes[0]
        assert x_shape is not None
        normalized = list(x_shape[dims[0] :])
        eps = self.epsilon
        has_b = len(sig.shapes) > 2 and sig.shapes[2] is not None
        fuse_s = sig.shapes[1] == tuple(normalized)
        # B is added after Scale multiplies: fused only when Scale is too.
        fuse_b = fuse_s and has_b and sig.shapes[2] == tuple(normalized)
        native_layer_norm, layer_norm = torch.native_layer_norm, F.layer_norm
        var_mean, rsqrt = torch.var_mean, torch.rsqrt

        def normalize(
            norm: Callable[..., Any], x: T, s: T, b: T | None
        ) -> tuple[Any, T | None, T | None]:
            """``norm`` with the fused Scale and B; the others, to apply afterwards."""
            out = norm(x, normalized, s if fuse_s else None, b if fuse_b else None, eps)
            return out, (None if fuse_s else s), (None if fuse_b else b)

        def affine(y: T, s: T | None, b: T | None) -> T:
            if s is not None:
                y = y * s
            if b is not None:
                y = y + b
            return y

        if for_grad:

            def graph(x: T, s: T, b: T | None = None) -> tuple[T, T, T]:
                y, s_after, b_after = normalize(layer_norm, x, s, b)
                var, mean = var_mean(x, dims, correction=0, keepdim=True)
                return affine(y, s_after, b_after), mean, rsqrt(var + eps)

            return graph
        if fuse_s and (fuse_b or not has_b):
            return lambda x, s, b=None: native_layer_norm(x, normalized, s, b, eps)

        def kernel(x: T, s: T, b: T | None = None) -> tuple[T, T, T]:
            (y, mean, rstd), s_after, b_after = normalize(native_layer_norm, x, s, b)
            return affine(y, s_after, b_after), mean, rstd

        return kernel


class Dropout(DropoutRules, TorchOperator):
    """ONNX ``Dropout`` (opset 13), with its ``output`` and boolean ``mask``.

    ``ratio`` and ``training_mode`` are optional inputs (an attribute of the same name is
    read when the input is absent). In training mode the mask is the reference's
    (:func:`reference_mask`: numpy's generator seeded with the ``seed`` attribute,
    default 0), drawn when the kernel is built, so ``forward`` is deterministic and
    validates against the numpy reference element by element. The kernel multiplies by
    the mask scaled by ``1 / (1 - ratio)``: the timed region holds the masking, not the
    drawing of the mask (which is numpy's, not torch's, work).
    """

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        ratio, training = self._mode(sig)
        shape = sig.shapes[0]
        assert shape is not None
        device, dtype = sig.device, sig.dtype
        if not training or ratio == 0.0:
            keep_all = torch.ones(shape, dtype=torch.bool, device=device)
            return lambda x: (x, keep_all)
        keep = reference_mask(shape, ratio, self.seed)
        mask = torch.as_tensor(keep, device=device)
        scaled = torch.as_tensor(keep / (1.0 - ratio), dtype=dtype, device=device)
        return lambda x: (x * scaled, mask)
