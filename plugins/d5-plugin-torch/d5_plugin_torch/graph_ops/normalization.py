"""Normalizations and losses: LayerNormalization, RMSNormalization,
InstanceNormalization, GroupNormalization, MeanVarianceNormalization, LpNormalization,
GlobalMaxPool and NegativeLogLikelihoodLoss."""

from __future__ import annotations

from typing import Any

import onnx
import torch
import torch.nn.functional as F

from d5_plugin_torch.graph_ops.base import Tensor, Translation, TranslatorBase, onnx_dtype
from d5core.api import UsageError

__all__ = ["NormalizationOps"]


def _working(x: Tensor, stash: torch.dtype) -> torch.dtype:
    """The type statistics are computed in: ``stash_type`` for inputs narrower than 32
    bits (float16, bfloat16), the input's own type otherwise, as onnx's reference does
    for float and double inputs."""
    return x.dtype if x.element_size() >= 4 else stash


class NormalizationOps(TranslatorBase):
    """Translators of normalizations and of NegativeLogLikelihoodLoss."""

    def _stash(self, a: dict[str, Any]) -> torch.dtype:
        return onnx_dtype(int(a.get("stash_type", onnx.TensorProto.FLOAT)))

    def op_LayerNormalization(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        axis, eps = int(a.get("axis", -1)), float(a.get("epsilon", 1e-5))
        stash = self._stash(a)
        stats = len(node.output) > 1 and any(node.output[1:])

        def layer_norm(x: Tensor, scale: Tensor, bias: Tensor | None = None) -> tuple[Tensor, ...]:
            ax = axis % x.dim()
            normalized = tuple(x.shape[ax:])
            if (
                not stats
                and tuple(scale.shape) == normalized
                and (bias is None or tuple(bias.shape) == normalized)
                and _working(x, stash) == x.dtype
            ):  # torch's fused kernel, forward and backward
                return (F.layer_norm(x, normalized, scale, bias, eps),)
            dims = tuple(range(ax, x.dim()))
            xs = x.to(_working(x, stash))
            mean = xs.mean(dim=dims, keepdim=True)
            centred = xs - mean
            inv_std = torch.rsqrt((centred * centred).mean(dim=dims, keepdim=True) + eps)
            y = (centred * inv_std).to(x.dtype) * scale
            if bias is not None:
                y = y + bias
            return (y, mean, inv_std)

        return layer_norm, list(node.input[:3])

    def op_RMSNormalization(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        axis, eps = int(a.get("axis", -1)), float(a.get("epsilon", 1e-5))
        stash = self._stash(a)

        def rms_norm(x: Tensor, scale: Tensor) -> tuple[Tensor]:
            dims = tuple(range(axis % x.dim(), x.dim()))
            xs = x.to(_working(x, stash))
            inv = torch.rsqrt((xs * xs).mean(dim=dims, keepdim=True) + eps)
            return ((xs * inv).to(x.dtype) * scale,)

        return rms_norm, list(node.input[:2])

    def op_InstanceNormalization(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        eps = float(a.get("epsilon", 1e-5))
        return (lambda x, s, b: (F.instance_norm(x, weight=s, bias=b, eps=eps),)), list(
            node.input[:3]
        )

    def op_GroupNormalization(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        groups, eps = int(a["num_groups"]), float(a.get("epsilon", 1e-5))
        stash = self._stash(a)

        def group_norm(x: Tensor, s: Tensor, b: Tensor) -> tuple[Tensor]:
            channels = x.shape[1]
            if s.numel() != channels:  # opset 18: one scale and bias per group
                s = s.repeat_interleave(channels // groups)
                b = b.repeat_interleave(channels // groups)
            y = F.group_norm(x.to(_working(x, stash)), groups, None, None, eps).to(x.dtype)
            shape = [1, -1] + [1] * (x.dim() - 2)
            return (y * s.reshape(shape) + b.reshape(shape),)

        return group_norm, list(node.input[:3])

    def op_MeanVarianceNormalization(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        axes = tuple(int(v) for v in a.get("axes", (0, 2, 3)))

        def mvn(x: Tensor) -> Tensor:
            mean = x.mean(dim=axes, keepdim=True)
            var = ((x - mean) ** 2).mean(dim=axes, keepdim=True)
            return (x - mean) / torch.sqrt(var + 1e-9)

        return self._unary(node, mvn)

    def op_LpNormalization(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        axis, p = int(a.get("axis", -1)), int(a.get("p", 2))
        if p not in (1, 2):
            raise UsageError(f"LpNormalization p must be 1 or 2, not {p}")

        def lp_norm(x: Tensor) -> Tensor:
            xs = x if x.is_floating_point() else x.to(torch.float64)
            norm = torch.linalg.vector_norm(xs, ord=p, dim=axis, keepdim=True)
            return (xs / torch.where(norm == 0, torch.ones_like(norm), norm)).to(x.dtype)

        return self._unary(node, lp_norm)

    def op_GlobalMaxPool(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        return self._unary(node, lambda x: x.amax(dim=tuple(range(2, x.dim())), keepdim=True))

    def op_NegativeLogLikelihoodLoss(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        reduction = str(a.get("reduction", "mean"))
        if reduction not in ("none", "sum", "mean"):
            raise UsageError(f"reduction must be none, sum or mean, not {reduction!r}")
        ignore = a.get("ignore_index")
        ignore_index = -100 if ignore is None else int(ignore)

        def nll(x: Tensor, target: Tensor, w: Tensor | None = None) -> tuple[Tensor]:
            t = target.to(torch.int64)
            if ignore is not None:  # torch checks the range before it ignores
                t = torch.where(t == ignore_index, torch.full_like(t, -100), t)
            return (F.nll_loss(x, t, w, ignore_index=-100, reduction=reduction),)

        return nll, list(node.input[:3])
