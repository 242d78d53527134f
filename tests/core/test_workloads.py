"""Operator problems, the DeepBench suites and the CPU peak estimate."""

from __future__ import annotations

import numpy as np
import pytest

from d5core.errors import UsageError
from d5core.lv0.workloads import roofline
from d5core.lv0.workloads.problems import (
    DEFAULT_PROBLEMS,
    SUITES,
    conv_problem,
    gemm_problem,
    parse_shapes,
    suite,
)


def test_deepbench_training_sets_are_complete():
    assert len(SUITES["deepbench-gemm"]) == 160
    assert len(SUITES["deepbench-conv"]) == 94
    assert SUITES["deepbench"] == SUITES["deepbench-gemm"] + SUITES["deepbench-conv"]


def test_gemm_problem_follows_onnx_transposes_and_counts_flops():
    p = gemm_problem(5, 3, 4, trans_a=1, trans_b=0)
    assert [s.shape for s in p.inputs] == [(4, 5), (4, 3)]
    assert p.attributes == {"transA": 1, "transB": 0}
    assert p.flops == 2 * 5 * 3 * 4


def test_conv_problem_uses_deepbench_argument_order():
    # w, h, c, n, k, s(filter w), r(filter h), pad_w, pad_h, stride_w, stride_h
    p = conv_problem(10, 8, 3, 2, 4, 5, 3, 2, 1, 2, 1)
    assert [s.shape for s in p.inputs] == [(2, 3, 8, 10), (4, 3, 3, 5)]
    assert p.attributes == {"pads": [1, 2, 1, 2], "strides": [1, 2]}
    out_h, out_w = (8 + 2 - 3) // 1 + 1, (10 + 4 - 5) // 2 + 1
    assert p.flops == 2 * 2 * 4 * 3 * 3 * 5 * out_h * out_w


def test_inputs_are_the_same_for_the_same_seed_and_typed_by_kind():
    p = DEFAULT_PROBLEMS["SoftmaxCrossEntropyLoss"]
    a, b = p.make_inputs("float64", 7), p.make_inputs("float64", 7)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert a[0].dtype == np.float64 and a[1].dtype == np.int64
    assert a[1].max() < 5


def test_suite_filters_by_operator_and_rejects_unknown_names():
    assert {p.op for p in suite("cpu-small", "Conv")} == {"Conv"}
    with pytest.raises(UsageError, match="no operator suite named 'huge'"):
        suite("huge")
    with pytest.raises(UsageError, match="has no Relu problems"):
        suite("cpu-small", "Relu")


def test_shapes_parse_and_bad_ones_are_named():
    assert parse_shapes("4x3, 3x5") == [(4, 3), (3, 5)]
    with pytest.raises(UsageError, match="'4xq'"):
        parse_shapes("4xq")
    with pytest.raises(UsageError, match="not positive"):
        parse_shapes("4x0")
    with pytest.raises(UsageError, match="takes 2 tensor shape"):
        DEFAULT_PROBLEMS["MatMul"].with_shapes([(2, 2)])


@pytest.mark.parametrize(("family", "bits"), [("25", 256), ("26", 512)])
def test_peak_counts_full_width_avx512_only_where_the_core_has_it(monkeypatch, family, bits):
    info = {
        "vendor_id": "AuthenticAMD",
        "cpu family": family,
        "model name": "AMD EPYC",
        "cpu mhz": "2000.0",
        "flags": "avx avx2 fma avx512f",
    }
    monkeypatch.delenv("D5_PEAK_GFLOPS", raising=False)
    monkeypatch.setattr(roofline, "read_cpuinfo", lambda: info)
    peak = roofline.estimate_peak(cores=2)
    assert peak.gflops["float32"] == pytest.approx(2 * 2.0 * (bits / 32) * 2 * 2)
    assert f"{bits}-bit" in peak.source


def test_peak_can_be_set_by_the_user(monkeypatch):
    monkeypatch.setenv("D5_PEAK_GFLOPS", "1000")
    peak = roofline.cpu_peak()
    assert peak.gflops == {"float32": 1000.0, "float64": 500.0}
    assert peak.source == "D5_PEAK_GFLOPS"


def test_plugins_add_suites_through_the_hook(d5_plugin_manager):
    from d5core.hookspecs import hookimpl

    class Mine:
        @hookimpl
        def d5_operator_shape_suites(self):
            return {"my-mlp": [{"op": "Gemm", "shapes": [[8, 4], [4, 2]], "name": "tiny"}]}

    d5_plugin_manager.register(Mine(), "mine")
    (problem,) = suite("my-mlp", "Gemm")
    assert problem.label == "tiny"
    assert [s.shape for s in problem.inputs] == [(8, 4), (4, 2)]


def _conv_layers(name: str) -> set[tuple[int, tuple[int, ...], tuple[int, ...], int]]:
    """(batch, X shape, W shape, stride) of every problem of suite ``name``."""
    layers = set()
    for p in suite(name, "Conv"):
        assert p.attributes["pads"] == [1, 1, 1, 1]
        stride_h, stride_w = p.attributes["strides"]
        assert stride_h == stride_w
        x, w = (s.shape for s in p.inputs)
        layers.add((x[0], x, w, stride_h))
    return layers


def test_resnet20_suite_holds_cifar_resnet20s_3x3_layers_at_batch_1_and_32():
    stages = [(16, 16, 32, 1), (32, 32, 16, 1), (64, 64, 8, 1), (16, 32, 32, 2), (32, 64, 16, 2)]
    want = {
        (n, (n, c, side, side), (k, c, 3, 3), stride)
        for n in (1, 32)
        for c, k, side, stride in stages
    }
    assert _conv_layers("resnet20-conv3x3") == want
    assert len(SUITES["resnet20-conv3x3"]) == 10


def test_resnet50_suite_holds_resnet50_v15s_3x3_layers_at_batch_1_and_32():
    stages = [(64, 56, 1), (128, 28, 1), (256, 14, 1), (512, 7, 1)]
    stages += [(128, 56, 2), (256, 28, 2), (512, 14, 2)]
    want = {
        (n, (n, c, side, side), (c, c, 3, 3), stride) for n in (1, 32) for c, side, stride in stages
    }
    assert _conv_layers("resnet50-conv3x3") == want
    assert len(SUITES["resnet50-conv3x3"]) == 14


@pytest.mark.parametrize("name", ["resnet20-conv3x3", "resnet50-conv3x3"])
def test_resnet_suites_count_direct_convolution_flops_on_the_strided_output(name):
    for p in suite(name):
        (n, c, h, w), (k, _, r, s) = (spec.shape for spec in p.inputs)
        stride = p.attributes["strides"][0]
        out = (h + 2 - 3) // stride + 1  # pad 1 each side
        assert out == h // stride
        assert p.flops == 2 * n * k * c * r * s * out * out
        assert f"n={n} c={c} {h}x{w} k={k} 3x3" in p.label
        assert f"stride={stride},{stride}" in p.label


def test_every_resnet50_3x3_layer_costs_the_same_per_image():
    # Each stage halves the side and doubles the channels, so every layer costs
    # 2 * 9 * 64^2 * 56^2 FLOPs per image; a stride-2 layer reads a side twice as large
    # and writes the same output as the stage it opens. A wrong entry breaks the equality.
    per_image = {p.flops // p.inputs[0].shape[0] for p in suite("resnet50-conv3x3")}
    assert per_image == {2 * 9 * 64 * 64 * 56 * 56}
