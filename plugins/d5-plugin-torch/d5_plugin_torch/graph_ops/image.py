"""Image geometry and detection: GridSample, AffineGrid, CenterCropPad, Col2Im and
NonMaxSuppression."""

from __future__ import annotations

from typing import Any

import onnx
import torch
import torch.nn.functional as F

from d5_plugin_torch.graph_ops.base import Tensor, Translation, TranslatorBase, int_list
from d5core.api import UsageError

__all__ = ["ImageOps"]

#: ONNX GridSample modes (both spellings, opset 16 and 20) -> torch's.
_SAMPLE_MODES = {
    "linear": "bilinear",
    "bilinear": "bilinear",
    "nearest": "nearest",
    "cubic": "bicubic",
    "bicubic": "bicubic",
}


def _suppresses(boxes: Tensor, center: bool, threshold: float) -> Tensor:
    """Whether box ``i`` suppresses box ``j`` (IoU above ``threshold``), for every pair
    of one batch's ``(boxes, 4)``; empty boxes and disjoint pairs never do."""
    b = boxes.to(torch.float64)
    if center:
        x_lo, x_hi = b[:, 0] - b[:, 2] / 2, b[:, 0] + b[:, 2] / 2
        y_lo, y_hi = b[:, 1] - b[:, 3] / 2, b[:, 1] + b[:, 3] / 2
    else:
        y_lo, y_hi = torch.minimum(b[:, 0], b[:, 2]), torch.maximum(b[:, 0], b[:, 2])
        x_lo, x_hi = torch.minimum(b[:, 1], b[:, 3]), torch.maximum(b[:, 1], b[:, 3])
    width = torch.minimum(x_hi[:, None], x_hi[None]) - torch.maximum(x_lo[:, None], x_lo[None])
    height = torch.minimum(y_hi[:, None], y_hi[None]) - torch.maximum(y_lo[:, None], y_lo[None])
    inter = width.clamp(min=0) * height.clamp(min=0)
    area = (x_hi - x_lo) * (y_hi - y_lo)
    union = area[:, None] + area[None] - inter
    valid = (width > 0) & (height > 0) & (area[:, None] > 0) & (area[None] > 0) & (union > 0)
    iou = inter / torch.where(union > 0, union, torch.ones_like(union))
    return valid & (iou > threshold)


class ImageOps(TranslatorBase):
    """Translators of image-geometry operators."""

    def op_GridSample(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        given = str(a.get("mode", "linear" if self.opset >= 20 else "bilinear"))
        mode = _SAMPLE_MODES.get(given)
        padding = str(a.get("padding_mode", "zeros"))
        if mode is None or padding not in ("zeros", "border", "reflection"):
            raise UsageError(
                f"GridSample mode {given!r} / padding_mode {padding!r} is not supported; "
                "use linear, nearest or cubic and zeros, border or reflection"
            )
        align = bool(int(a.get("align_corners", 0)))

        def grid_sample(x: Tensor, grid: Tensor) -> tuple[Tensor]:
            return (
                F.grid_sample(
                    x, grid.to(x.dtype), mode=mode, padding_mode=padding, align_corners=align
                ),
            )

        return grid_sample, list(node.input[:2])

    def op_AffineGrid(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        align = bool(int(a.get("align_corners", 0)))
        size_of = self.value(node, 1)

        def affine_grid(theta: Tensor, size_t: Tensor | None) -> tuple[Tensor]:
            size = int_list(size_of(size_t)) or []
            return (F.affine_grid(theta, size, align_corners=align),)

        return affine_grid, list(node.input[:2])

    def op_CenterCropPad(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        axes_attr = a.get("axes")
        shape_of = self.value(node, 1)

        def center_crop_pad(x: Tensor, shape_t: Tensor | None) -> tuple[Tensor]:
            target = int_list(shape_of(shape_t)) or []
            rank = x.dim()
            axes = (
                [int(d) % rank for d in axes_attr] if axes_attr is not None else list(range(rank))
            )
            flat = [0] * (2 * rank)  # F.pad order: last axis first, (begin, end)
            for d, size in zip(axes, target, strict=False):
                diff = size - x.shape[d]  # > 0 pads, < 0 crops: the extra one at the end
                begin = diff // 2 if diff >= 0 else -((-diff) // 2)
                slot = 2 * (rank - 1 - d)
                flat[slot], flat[slot + 1] = begin, diff - begin
            return (F.pad(x, flat),)

        return center_crop_pad, list(node.input[:2])

    def op_NonMaxSuppression(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        center = bool(int(a.get("center_point_box", 0)))

        def nms(boxes: Tensor, scores: Tensor, *limits: Tensor | None) -> tuple[Tensor]:
            given = [
                None if t is None or t.numel() == 0 else float(t.reshape(-1)[0]) for t in limits
            ]
            given += [None] * (3 - len(given))
            most = max(int(given[0] or 0), 0)
            iou = given[1] if given[1] is not None else 0.0
            floor = given[2]
            selected: list[tuple[int, int, int]] = []
            for batch in range(boxes.shape[0]):
                suppress = _suppresses(boxes[batch], center, iou).tolist()
                for cls in range(scores.shape[1]):
                    values = scores[batch, cls]
                    order = torch.sort(values, descending=True, stable=True).indices.tolist()
                    kept: list[int] = []
                    for box in order:
                        if len(kept) >= most:
                            break
                        if floor is not None and not float(values[box]) > floor:
                            continue
                        if not any(suppress[box][other] for other in kept):
                            kept.append(box)
                    selected += [(batch, cls, box) for box in kept]
            out = torch.tensor(selected, dtype=torch.int64, device=boxes.device)
            return (out.reshape(-1, 3),)

        return nms, list(node.input[:5])

    def op_Col2Im(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        image_of, block_of = self.value(node, 1), self.value(node, 2)

        def col2im(x: Tensor, image_t: Tensor | None, block_t: Tensor | None) -> tuple[Tensor]:
            image, block = int_list(image_of(image_t)) or [], int_list(block_of(block_t)) or []
            if len(image) != 2:
                raise UsageError(
                    f"Col2Im runs on 2-D images in the torch executor, not {len(image)}-D"
                )
            dilations = tuple(int(d) for d in a.get("dilations") or (1, 1))
            strides = tuple(int(s) for s in a.get("strides") or (1, 1))
            pads = [int(p) for p in a.get("pads") or (0, 0, 0, 0)]
            padded = (image[0] + pads[0] + pads[2], image[1] + pads[1] + pads[3])
            y = F.fold(x, padded, tuple(block), dilation=dilations, padding=0, stride=strides)
            return (y[:, :, pads[0] : pads[0] + image[0], pads[1] : pads[1] + image[1]],)

        return col2im, list(node.input[:3])
