"""The ONNX input, attribute and shape checks that operator backends share
(``d5core.onnx.checks``, exported by ``d5core.api``)."""

from __future__ import annotations

import numpy as np
import pytest

from d5core.api import TensorDescriptor, UsageError
from d5core.onnx import (
    DescribedInput,
    InputSlot,
    check_attribute_names,
    check_class_labels,
    check_concat_shapes,
    check_float_dtypes,
    check_per_channel,
    check_rank,
    check_scalar_input,
    dropout_ratio,
    flatten_target,
    gemm_output_shape,
    int_list_attribute,
    integer_values,
    is_integer_dtype,
    match_input_slots,
    normalize_axes,
    onnx_signature,
    reshape_target,
    slot_has_no_gradient,
    squeeze_axes,
    transpose_perm,
    unsqueeze_axes,
)

GEMM = (InputSlot("A"), InputSlot("B"), InputSlot("C", optional=True))
SUM = (InputSlot("data_0", variadic=True),)
LOSS = (InputSlot("scores"), InputSlot("labels", kind="index"))


def test_unknown_attribute_is_named_with_the_ones_the_operator_takes():
    check_attribute_names("Relu", {}, {})
    with pytest.raises(
        UsageError, match=r"^Gemm: unknown attribute 'beat'; it takes: alpha, beta$"
    ):
        check_attribute_names("Gemm", {"beat": 1.0}, {"beta": 1.0, "alpha": 1.0})
    with pytest.raises(UsageError, match=r"it takes: none$"):
        check_attribute_names("Relu", {"alpha": 1}, {})


def test_int_list_attribute_converts_and_refuses_non_integers():
    assert int_list_attribute("Conv", "pads", (1, np.int64(2))) == [1, 2]
    assert int_list_attribute("Conv", "pads", None) is None
    with pytest.raises(UsageError, match=r"^Conv: attribute 'pads' must be a list of integers"):
        int_list_attribute("Conv", "pads", ["a"])


def test_optional_inputs_may_be_left_out_at_the_end():
    assert match_input_slots("Gemm", GEMM, 2) == GEMM[:2]
    assert match_input_slots("Gemm", GEMM, 3) == GEMM
    with pytest.raises(UsageError, match=r"^Gemm: takes 2 to 3 inputs \(A, B, C\?\), got 1$"):
        match_input_slots("Gemm", GEMM, 1)
    with pytest.raises(UsageError, match=r"^Relu: takes 1 input \(X\), got 2$"):
        match_input_slots("Relu", (InputSlot("X"),), 2)


def test_a_variadic_slot_takes_every_remaining_input():
    assert match_input_slots("Sum", SUM, 3) == SUM * 3
    with pytest.raises(UsageError, match=r"^Sum: takes at least 1 inputs \(data_0\.\.\.\), got 0$"):
        match_input_slots("Sum", SUM, 0)


def test_index_static_and_non_differentiable_slots_have_no_gradient():
    slots = (InputSlot("X"), InputSlot("mask", differentiable=False), InputSlot("shape", "static"))
    assert [slot_has_no_gradient(slots, i) for i in range(3)] == [False, True, True]
    assert slot_has_no_gradient(LOSS, 1)
    assert not slot_has_no_gradient(LOSS, 5)  # past the slots
    assert not slot_has_no_gradient(SUM, 5)  # a variadic float slot
    assert not slot_has_no_gradient((), 0)


def test_float_inputs_must_share_one_supported_dtype():
    f32, f64 = np.zeros(2, np.float32), np.zeros(2, np.float64)
    assert (
        check_float_dtypes("Gemm", GEMM[:2], [f32, f32], ("float32", "float64"), "x") == "float32"
    )
    assert check_float_dtypes("Gemm", GEMM, [f64, f64, None], ("float32", "float64"), "x") == (
        "float64"
    )
    with pytest.raises(
        UsageError, match=r"^Gemm: input B has dtype float64 but A has float32; floating inputs"
    ):
        check_float_dtypes("Gemm", GEMM[:2], [f32, f64], ("float32", "float64"), "x")
    with pytest.raises(
        UsageError, match=r"^Gemm: input A has dtype float16; the mine backend supports float32$"
    ):
        check_float_dtypes("Gemm", GEMM[:2], [f32.astype(np.float16), f32], ("float32",), "mine")


def test_required_inputs_and_integer_inputs_are_checked():
    f32 = np.zeros(2, np.float32)
    with pytest.raises(UsageError, match=r"^Gemm: input B is required$"):
        check_float_dtypes("Gemm", GEMM[:2], [f32, None], ("float32",), "x")
    with pytest.raises(
        UsageError, match=r"^Loss: input labels must hold integers, got dtype float32"
    ):
        check_float_dtypes("Loss", LOSS, [f32, f32], ("float32",), "x")
    assert check_float_dtypes("Loss", LOSS, [f32, np.zeros(2, np.int64)], ("float32",), "x")


def test_descriptors_stand_in_for_arrays():
    described = DescribedInput(TensorDescriptor((2, 3), "float32"))
    assert described.shape == (2, 3) and described.dtype == "float32"
    assert check_float_dtypes("Relu", (InputSlot("X"),), [described], ("float32",), "x")
    assert is_integer_dtype("int32") and not is_integer_dtype("float32")
    assert not is_integer_dtype("bfloat16")


def test_rank_messages_name_the_ranks_expected():
    check_rank("Conv", "X", (1, 2, 3), (3, 4, 5))
    with pytest.raises(
        UsageError,
        match=r"^Conv: input X must have rank 3, 4 or 5 \(N, C, \.\.\.\), got shape \(1, 2\)$",
    ):
        check_rank("Conv", "X", (1, 2), (3, 4, 5), what="(N, C, ...)")
    with pytest.raises(UsageError, match=r"must have rank 2 or more, got shape <5>$"):
        check_rank("Softmax", "input", (5,), at_least=2, shown="<5>")


def test_reshape_copies_zeros_and_infers_one_minus_one():
    assert reshape_target((2, 3, 4), [0, -1], allowzero=False) == (2, 12)
    assert reshape_target((2, 0), [0, 2], allowzero=True) == (0, 2)
    with pytest.raises(UsageError, match=r"^Reshape: shape \[2, -1, -1\] may hold one -1"):
        reshape_target((2, 3), [2, -1, -1], allowzero=False)
    with pytest.raises(UsageError, match=r"\(6 elements\) cannot be reshaped to \[4\]$"):
        reshape_target((2, 3), [4], allowzero=False)
    with pytest.raises(UsageError, match=r"copies \(0\) an axis that data \(2,\) lacks"):
        reshape_target((2,), [2, 0], allowzero=False)


def test_flatten_transpose_and_concat_follow_onnx():
    assert flatten_target((2, 3, 4), -1) == (6, 4)
    assert flatten_target((2, 3, 4), 0) == (1, 24)
    with pytest.raises(UsageError, match=r"^Flatten: axis 4 is out of range"):
        flatten_target((2, 3, 4), 4)
    assert transpose_perm((2, 3, 4), None) == (2, 1, 0)
    with pytest.raises(UsageError, match=r"^Transpose: perm \[0, 0\] is not a permutation"):
        transpose_perm((2, 3), [0, 0])
    assert check_concat_shapes([(2, 3), (2, 5)], -1) == 1
    with pytest.raises(UsageError, match=r"^Concat: input 1 of shape \(3, 5\) does not match"):
        check_concat_shapes([(2, 3), (3, 5)], 1)
    with pytest.raises(UsageError, match=r"^Concat: axis \[2\] has 2, out of range for rank 2$"):
        check_concat_shapes([(2, 3), (2, 3)], 2)


def test_axes_inputs_are_one_dimensional_integers_each_named_once():
    assert integer_values("Squeeze", "axes", np.array([1, -1])) == [1, -1]
    with pytest.raises(UsageError, match=r"^Squeeze: input axes must be a 1-D integer tensor"):
        integer_values("Squeeze", "axes", np.array([[1]]))
    assert normalize_axes("Squeeze", [-1, 0], 3) == [2, 0]
    with pytest.raises(UsageError, match=r"names an axis twice$"):
        normalize_axes("Squeeze", [0, -3], 3)


def test_squeeze_and_unsqueeze_axes():
    assert squeeze_axes((1, 3, 1), None) == (0, 2)
    assert squeeze_axes((1, 3, 1), np.array([-1])) == (2,)
    with pytest.raises(UsageError, match=r"^Squeeze: axes \[1\] of data \(1, 3, 1\) are not all"):
        squeeze_axes((1, 3, 1), np.array([1]))
    assert unsqueeze_axes((3,), np.array([0, -1])) == (0, 2)
    with pytest.raises(UsageError, match=r"^Unsqueeze: input axes is required$"):
        unsqueeze_axes((3,), None)


def test_gemm_inner_dimensions_agree_after_transposition_and_c_broadcasts():
    assert gemm_output_shape((3, 4), (4, 5), (5,), trans_a=False, trans_b=False) == (3, 5)
    assert gemm_output_shape((4, 3), (5, 4), (3, 1), trans_a=True, trans_b=True) == (3, 5)
    with pytest.raises(UsageError, match=r"^Gemm: inner dimensions differ: A' is \(3, 4\) and B'"):
        gemm_output_shape((3, 4), (5, 4), None, trans_a=False, trans_b=False)
    with pytest.raises(UsageError, match=r"^Gemm: input C of shape \(2, 5\) does not broadcast"):
        gemm_output_shape((3, 4), (4, 5), (2, 5), trans_a=False, trans_b=False)


def test_per_channel_and_scalar_inputs():
    check_per_channel("BatchNormalization", (2, 3, 4), [("scale", (3,)), ("B", (3,))])
    with pytest.raises(UsageError, match=r"^BatchNormalization: input B must have shape \(3,\)"):
        check_per_channel("BatchNormalization", (2, 3, 4), [("scale", (3,)), ("B", (4,))])
    for shape in (None, (), (1,)):
        check_scalar_input("Dropout", "ratio", shape)
    with pytest.raises(
        UsageError, match=r"^Dropout: input ratio must be a scalar, got shape \(2,\)"
    ):
        check_scalar_input("Dropout", "ratio", (2,))
    assert dropout_ratio("Dropout", 0.0) == 0.0
    with pytest.raises(UsageError, match=r"^Dropout: ratio must lie in \[0, 1\), got 1.0$"):
        dropout_ratio("Dropout", 1.0)


def test_class_labels_match_the_scores_and_lie_in_range():
    loss = "SoftmaxCrossEntropyLoss"
    labels = np.array([0, 2, -1])
    check_class_labels(loss, (3, 3), (3,), (3,), labels, ignore_index=-1)
    check_class_labels(loss, (3, 3), (3,), None, None, ignore_index=None)  # values unknown
    with pytest.raises(UsageError, match=r"found -1$"):
        check_class_labels(loss, (3, 3), (3,), None, labels, ignore_index=None)
    with pytest.raises(UsageError, match=r"input labels must have shape \(3, 5\) \(scores"):
        check_class_labels(loss, (3, 4, 5), (3,), None, None, ignore_index=None)
    with pytest.raises(UsageError, match=r"input weights must have shape \(4,\), got \(3,\)$"):
        check_class_labels(loss, (3, 4), (3,), (3,), None, ignore_index=None)


def test_onnx_signatures_list_inputs_and_attribute_defaults():
    gemm = onnx_signature("Gemm")
    assert [s.name for s in gemm.slots] == ["A", "B", "C"] and gemm.slots[2].optional
    assert gemm.attribute_defaults == {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0}
    with pytest.raises(TypeError):
        gemm.attribute_defaults["alpha"] = 2.0  # type: ignore[index]
    reshape = onnx_signature("Reshape")
    assert reshape.slots[1].kind == "static" and reshape.slots[1].integer
    assert onnx_signature("Sum").slots[-1].variadic
    with pytest.raises(UsageError, match=r"no ONNX signature for operator 'Foo'; known: .*Gemm"):
        onnx_signature("Foo")
