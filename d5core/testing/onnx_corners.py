"""ONNX corners where executors gave wrong answers: a kit any executor plugin can run.

An independent audit found executors that computed these silently wrong, or died on
them: ConvTranspose with ``output_shape`` (ONNX splits the padding it implies, the
beginning getting ``total - total // 2``), BatchNormalization of opsets before 9 with
``spatial=0`` (statistics per element, not per channel) and PRelu of opsets before 7
with a per-channel slope. For each, an executor must either compute what ONNX defines,
checked here against an independent float64 reference written in plain numpy, or refuse
it with a one-line :class:`~d5core.errors.UsageError`. Anything else (a wrong value, a
wrong shape, another exception) fails.

A plugin author subclasses :class:`OnnxCornerTests` under a name pytest collects::

    from d5core.testing.onnx_corners import OnnxCornerTests
    from my_plugin.executor import MyExecutor

    class TestMyExecutorOnOnnxCorners(OnnxCornerTests):
        executor = MyExecutor

Import this module in tests only: it imports onnx and pytest.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from d5core.errors import UsageError
from d5core.levels.networks import GraphExecutor

__all__ = [
    "CONV_TRANSPOSE_CASES",
    "OnnxCornerTests",
    "batch_norm_model",
    "batch_norm_reference",
    "conv_transpose_model",
    "conv_transpose_reference",
    "prelu_model",
    "prelu_reference",
]

#: ConvTranspose cases ``(id, x shape, w shape, attributes)``: 1-d and 2-d, odd and even
#: total paddings, ``output_shape`` with and without (ignored) ``pads``, with ``auto_pad``
#: SAME_UPPER and SAME_LOWER, and a target larger than the full output.
CONV_TRANSPOSE_CASES: list[tuple[str, tuple[int, ...], tuple[int, ...], dict[str, Any]]] = [
    ("1d_odd_total", (1, 2, 4), (2, 3, 3), {"strides": [2], "output_shape": [6]}),
    ("1d_even_total", (1, 2, 4), (2, 3, 3), {"strides": [2], "output_shape": [7]}),
    ("1d_pads_ignored", (1, 2, 4), (2, 3, 3),
     {"strides": [2], "output_shape": [6], "pads": [0, 0]}),
    ("1d_same_upper", (1, 2, 4), (2, 3, 3),
     {"strides": [2], "output_shape": [6], "auto_pad": "SAME_UPPER"}),
    ("1d_same_lower", (1, 2, 4), (2, 3, 3),
     {"strides": [2], "output_shape": [6], "auto_pad": "SAME_LOWER"}),
    ("1d_larger_than_full", (1, 2, 4), (2, 3, 3), {"strides": [2], "output_shape": [10]}),
    ("2d_even_total", (2, 1, 3, 3), (1, 2, 3, 3), {"strides": [2, 2], "output_shape": [5, 5]}),
    ("2d_odd_and_even", (2, 1, 3, 3), (1, 2, 3, 3), {"strides": [2, 2], "output_shape": [4, 6]}),
    ("2d_full_nc_shape", (1, 2, 3, 4), (2, 2, 2, 3),
     {"strides": [3, 2], "output_shape": [1, 2, 6, 7], "dilations": [1, 2]}),
]  # fmt: skip


def _model(
    node: onnx.NodeProto,
    inputs: Mapping[str, tuple[int, ...]],
    out_shape: Sequence[int],
    opset: int,
) -> onnx.ModelProto:
    graph = helper.make_graph(
        [node],
        "corner",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in inputs.items()],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, list(out_shape))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 3 if opset < 7 else 8
    return model


def _conv_transpose_target(
    x: Sequence[int], w: Sequence[int], attrs: Mapping[str, Any]
) -> list[int]:
    n = len(x) - 2
    given = attrs.get("output_shape")
    if given is not None:
        return [int(t) for t in list(given)[-n:]]
    return [int(i) * int(s) for i, s in zip(x[2:], attrs["strides"], strict=True)]


def conv_transpose_model(
    x: tuple[int, ...], w: tuple[int, ...], attrs: Mapping[str, Any], *, opset: int = 17
) -> onnx.ModelProto:
    """``Y = ConvTranspose(X, W)`` with ``attrs`` (``output_shape`` or SAME_* auto_pad,
    no bias), in one node named ``node``."""
    node = helper.make_node("ConvTranspose", ["X", "W"], ["Y"], name="node", **attrs)
    out = [x[0], w[1] * int(attrs.get("group", 1)), *_conv_transpose_target(x, w, attrs)]
    return _model(node, {"X": x, "W": w}, out, opset)


def conv_transpose_reference(x: np.ndarray, w: np.ndarray, attrs: Mapping[str, Any]) -> np.ndarray:
    """ONNX ConvTranspose (group 1) in float64 by scattering: each input element lays its
    kernel into the full output, from which the spec's padding is cut. With
    ``output_shape`` (or SAME_*) the total padding is split with ``total - total // 2``
    at the beginning (``total // 2`` for SAME_UPPER); a target larger than the full
    output is zero beyond it. Written without any framework, to judge executors."""
    n = x.ndim - 2
    strides = list(attrs.get("strides") or [1] * n)
    dilations = list(attrs.get("dilations") or [1] * n)
    kernel = w.shape[2:]
    full = [
        s * (i - 1) + (k - 1) * d + 1
        for s, i, k, d in zip(strides, x.shape[2:], kernel, dilations, strict=True)
    ]
    y: Any = np.zeros((x.shape[0], w.shape[1], *full))
    xs: Any = x.astype(np.float64)
    ws: Any = w.astype(np.float64)
    for pos in itertools.product(*(range(i) for i in x.shape[2:])):
        for tap in itertools.product(*(range(k) for k in kernel)):
            at = tuple(
                p * s + t * d for p, s, t, d in zip(pos, strides, tap, dilations, strict=True)
            )
            whole: tuple[Any, ...] = (slice(None), slice(None))
            y[(*whole, *at)] += xs[(*whole, *pos)] @ ws[(*whole, *tap)]
    target = _conv_transpose_target(x.shape, w.shape, attrs)
    upper = attrs.get("auto_pad") == "SAME_UPPER"
    begins = []
    for f, t in zip(full, target, strict=True):
        total = max(f - t, 0)
        begins.append(total // 2 if upper else total - total // 2)
    out: Any = np.zeros((x.shape[0], w.shape[1], *target))
    for idx in itertools.product(*(range(t) for t in target)):
        src = tuple(i + b for i, b in zip(idx, begins, strict=True))
        if all(s < f for s, f in zip(src, full, strict=True)):
            out[(slice(None), slice(None), *idx)] = y[(slice(None), slice(None), *src)]
    return np.asarray(out)


def batch_norm_model(channels_shape: tuple[int, ...], *, spatial: int) -> onnx.ModelProto:
    """Opset-7 ``Y = BatchNormalization(X, scale, B, mean, var)`` of X ``(2, 3, 4, 5)``
    with ``spatial``; the four per-feature inputs have shape ``channels_shape``."""
    node = helper.make_node(
        "BatchNormalization", ["X", "s", "b", "m", "v"], ["Y"], name="node",
        epsilon=1e-5, spatial=spatial,
    )  # fmt: skip
    inputs = {"X": (2, 3, 4, 5), **{k: channels_shape for k in "sbmv"}}
    return _model(node, inputs, (2, 3, 4, 5), 7)


def batch_norm_reference(feeds: Mapping[str, np.ndarray], *, spatial: int) -> np.ndarray:
    """Inference-mode BatchNormalization in float64: per channel, or with ``spatial=0``
    per element of ``(C, D1, ...)``, broadcast over the batch."""
    x = feeds["X"].astype(np.float64)
    shape = (1, -1) + (1,) * (x.ndim - 2) if spatial else (1, *feeds["s"].shape)
    s, b, m, v = (feeds[k].astype(np.float64).reshape(shape) for k in "sbmv")
    return np.asarray((x - m) / np.sqrt(v + 1e-5) * s + b)


def prelu_model(slope_shape: tuple[int, ...], *, opset: int) -> onnx.ModelProto:
    """``Y = PRelu(X, slope)`` of X ``(2, 3, 4, 5)`` at ``opset``."""
    node = helper.make_node("PRelu", ["X", "slope"], ["Y"], name="node")
    return _model(node, {"X": (2, 3, 4, 5), "slope": slope_shape}, (2, 3, 4, 5), opset)


def prelu_reference(x: np.ndarray, slope: np.ndarray) -> np.ndarray:
    """PRelu in float64; a 1-d slope that numpy cannot broadcast lies along the one axis
    of ``x`` of its length (before opset 7, a per-channel slope)."""
    s = slope.astype(np.float64)
    try:
        np.broadcast_shapes(x.shape, s.shape)
    except ValueError:
        axes = [i for i, d in enumerate(x.shape) if d == s.shape[0]]
        assert s.ndim == 1 and len(axes) == 1, "the kit's slope fits one axis"
        s = s.reshape([s.shape[0] if i == axes[0] else 1 for i in range(x.ndim)])
    xs = x.astype(np.float64)
    return np.asarray(np.where(xs >= 0, xs, xs * s))


class OnnxCornerTests:
    """ONNX corners an executor computes right or refuses in one line; subclass it with
    ``executor`` set (see the module docstring)."""

    #: The executor class under test.
    executor: ClassVar[type[GraphExecutor]]
    #: Absolute tolerance against the float64 references (float32 executors).
    atol: ClassVar[float] = 1e-4
    #: The corners the executor may refuse (in one line) rather than compute: any of
    #: ``"conv_transpose_output_shape"``, ``"batch_norm_spatial_0"``, ``"prelu_legacy"``
    #: (PRelu before opset 7), ``"prelu"`` (PRelu at all).
    may_refuse: ClassVar[frozenset[str]] = frozenset()

    def right_or_refused(
        self,
        corner: str,
        model: onnx.ModelProto,
        feeds: Mapping[str, np.ndarray],
        want: np.ndarray,
    ) -> None:
        """Run ``model`` on the executor under test: its ``Y`` must equal ``want`` (shape
        and values within ``atol``), or, when ``corner`` is in :attr:`may_refuse`, the
        executor may raise a one-line UsageError instead."""
        try:
            got = np.asarray(self.executor(model).inference(dict(feeds))["Y"])
        except UsageError as exc:
            if corner not in self.may_refuse:
                raise
            assert "\n" not in str(exc).strip(), f"a refusal must be one line: {exc}"
            return
        assert got.shape == want.shape, f"shape {got.shape}, expected {want.shape}"
        worst = float(np.max(np.abs(got.astype(np.float64) - want)))
        assert worst <= self.atol, f"max abs error {worst:.3g} against the reference"

    @pytest.mark.parametrize(
        ("x_shape", "w_shape", "attrs"),
        [c[1:] for c in CONV_TRANSPOSE_CASES],
        ids=[c[0] for c in CONV_TRANSPOSE_CASES],
    )
    def test_conv_transpose_with_output_shape_splits_the_padding_as_onnx_does(
        self, x_shape: tuple[int, ...], w_shape: tuple[int, ...], attrs: dict[str, Any]
    ) -> None:
        rng = np.random.default_rng(7)
        x = rng.standard_normal(x_shape).astype(np.float32)
        w = rng.standard_normal(w_shape).astype(np.float32)
        want = conv_transpose_reference(x, w, attrs)
        model = conv_transpose_model(x_shape, w_shape, attrs)
        self.right_or_refused("conv_transpose_output_shape", model, {"X": x, "W": w}, want)

    @pytest.mark.parametrize("spatial", [0, 1])
    def test_batch_normalization_spatial_0_is_per_element_or_refused(self, spatial: int) -> None:
        rng = np.random.default_rng(3)
        shape = (3,) if spatial else (3, 4, 5)
        feeds = {"X": rng.standard_normal((2, 3, 4, 5)).astype(np.float32)}
        for k in "sbm":
            feeds[k] = rng.standard_normal(shape).astype(np.float32)
        feeds["v"] = (rng.random(shape) + 0.5).astype(np.float32)
        want = batch_norm_reference(feeds, spatial=spatial)
        corner = "batch_norm_spatial_0" if not spatial else ""
        self.right_or_refused(corner, batch_norm_model(shape, spatial=spatial), feeds, want)

    @pytest.mark.parametrize(
        ("slope_shape", "opset"),
        [((3,), 6), ((4,), 6), ((1,), 6), ((5,), 6), ((3, 1, 1), 6), ((3, 1, 1), 7)],
        ids=["per_channel_6", "axis_2_6", "shared_6", "last_axis_6", "broadcast_6", "broadcast_7"],
    )
    def test_prelu_slope_broadcasts_as_its_opset_says_or_is_refused(
        self, slope_shape: tuple[int, ...], opset: int
    ) -> None:
        rng = np.random.default_rng(5)
        x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
        slope = rng.standard_normal(slope_shape).astype(np.float32)
        want = prelu_reference(x, slope)
        model = prelu_model(slope_shape, opset=opset)
        corner = "prelu_legacy" if opset < 7 else "prelu"
        self.right_or_refused(corner, model, {"X": x, "slope": slope}, want)
