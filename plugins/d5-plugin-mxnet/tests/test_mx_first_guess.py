"""A first signature's symbol is built from the shapes ONNX's shape inference tells (the
batch dimension bound to the feeds'), checked by one MXNet inference of every value:
one inference instead of one per node that reads a shape. A guess that is wrong costs
a round or the node-by-node path, never a wrong symbol; values it leaves out are
inferred by MXNet when a node reads them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import pytest
from compile_checks import assert_derived_as_imperative
from d5_plugin_mxnet._mx import mxnet
from d5_plugin_mxnet.executor import (
    _WEIGHT_TYPES,
    MXNetExecutor,
    _bound_shapes,
    _declared_values,
    _without_weights,
)

from d5core.testing.executors import build_network, make_feeds, with_loss

MODELS = ["mlp", "lenet5", "resnet20", "vgg", "lstm", "bert"]


def _first(model: str, batch: int = 5) -> tuple[MXNetExecutor, dict[str, Any], str, list[str]]:
    net, loss = with_loss(build_network(model, seed=0))
    ex = MXNetExecutor(net)
    arrays = ex.to_native(make_feeds(net, batch, seed=2))
    return ex, arrays, loss, ex._heads(True, loss)


@pytest.mark.parametrize("model", [*MODELS, "vit"])
@pytest.mark.parametrize("training", [True, False])
def test_a_first_signature_is_derived_with_one_inference(
    model: str, training: bool, inferences: list[int]
) -> None:
    ex, arrays, loss, _ = _first(model)
    heads = ex._heads(training, loss if training else None)
    derived = ex._derived(arrays, training, heads, {**ex._known})
    assert derived is not None
    assert len(inferences) == 1
    assert all(h in derived.shapes for h in heads)


def test_a_guess_through_computed_shapes_gives_the_imperative_symbol() -> None:
    """ViT's shapes are computed by Shape, Gather and Concat nodes: ONNX's data
    propagation tells them."""
    ex, arrays, loss, heads = _first("vit")
    derived = ex._derived(arrays, True, heads, {**ex._known})
    assert derived is not None
    assert_derived_as_imperative(ex, arrays, loss, heads, derived, {**ex._known})


def test_the_guess_binds_the_batch_dimension_to_the_feeds() -> None:
    ex, arrays, _, _ = _first("lenet5", batch=7)
    guess = ex._first_guess(arrays, {**ex._base(True), **arrays})
    assert guess is not None
    shapes, dtypes = guess
    assert shapes["input"] == (7, 1, 28, 28) and shapes["labels"] == (7,)
    assert shapes["conv0"] == (7, 6, 28, 28) and shapes["flatten0"] == (7, 400)
    assert dtypes["conv0"] == np.dtype(np.float32) and dtypes["labels"] == np.dtype(np.int64)


def _edited_guess(
    monkeypatch: pytest.MonkeyPatch, ex: MXNetExecutor, edit: Callable[[dict, dict], None]
) -> None:
    """``ex``'s first guess with ``edit(shapes, dtypes)`` applied to it."""
    first_guess = ex._first_guess

    def edited(*args: Any) -> Any:
        guess = first_guess(*args)
        assert guess is not None
        edit(*guess)
        return guess

    monkeypatch.setattr(ex, "_first_guess", edited)


@pytest.mark.parametrize("wrong", ["batch", "rank", "dtype"])
def test_a_wrong_guess_still_gives_the_symbol_an_imperative_pass_builds(
    wrong: str, monkeypatch: pytest.MonkeyPatch, inferences: list[int]
) -> None:
    ex, arrays, loss, heads = _first("lenet5")

    def spoil(shapes: dict, dtypes: dict) -> None:
        for name in ("conv0", "maxpool0", "flatten0"):
            if wrong == "batch":
                shapes[name] = (shapes[name][0] * 2, *shapes[name][1:])
            elif wrong == "rank":
                shapes[name] = (*shapes[name], 1)
            else:
                dtypes[name] = np.dtype(np.float64)

    _edited_guess(monkeypatch, ex, spoil)
    derived = ex._derived(arrays, True, heads, {**ex._known})
    assert derived is not None
    assert len(inferences) > 1  # the wrong guess cost a round (or the node-by-node path)
    assert_derived_as_imperative(ex, arrays, loss, heads, derived, {**ex._known})


def test_values_the_guess_leaves_out_are_inferred_when_a_node_reads_them(
    monkeypatch: pytest.MonkeyPatch, inferences: list[int]
) -> None:
    ex, arrays, loss, heads = _first("lenet5")

    def leave_out(shapes: dict, dtypes: dict) -> None:
        for name in ("maxpool1", "flatten0"):  # read by the next node
            del shapes[name], dtypes[name]

    _edited_guess(monkeypatch, ex, leave_out)
    derived = ex._derived(arrays, True, heads, {**ex._known})
    assert derived is not None
    # at most one for each value left out (when a node reads it), and one to check them all
    assert 2 <= len(inferences) <= 3
    assert derived.shapes["maxpool1"] == (5, 16, 5, 5)
    assert_derived_as_imperative(ex, arrays, loss, heads, derived, {**ex._known})


def test_without_a_guess_the_first_signature_is_built_node_by_node(
    monkeypatch: pytest.MonkeyPatch, inferences: list[int]
) -> None:
    ex, arrays, loss, heads = _first("lenet5")
    monkeypatch.setattr(ex, "_first_guess", lambda *args: None)
    derived = ex._derived(arrays, True, heads, {**ex._known})
    assert derived is not None
    assert len(inferences) > 1
    assert_derived_as_imperative(ex, arrays, loss, heads, derived, {**ex._known})


@pytest.mark.parametrize("model", ["lenet5", "bert"])
def test_the_weights_data_changes_no_declared_shape(model: str) -> None:
    net, _ = with_loss(build_network(model, seed=0))
    light = _without_weights(net.model)
    assert all(t.data_type not in _WEIGHT_TYPES for t in light.graph.initializer)
    declared = _declared_values(net.model)
    full = onnx.shape_inference.infer_shapes(net.model).graph.value_info
    assert len(full) > 3
    for value in full:
        dims = tuple(d.dim_value or d.dim_param for d in value.type.tensor_type.shape.dim)
        assert declared[value.name][0] == dims, value.name
    assert declared["input" if model == "lenet5" else "input_ids"][0][0] == "N"


def test_when_shape_inference_fails_the_first_signature_is_built_node_by_node(
    monkeypatch: pytest.MonkeyPatch, inferences: list[int]
) -> None:
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise onnx.shape_inference.InferenceError("no inference here")

    ex, arrays, loss, heads = _first("lenet5")  # d5's Network infers shapes too
    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", refused)
    assert ex._first_guess(arrays, {**ex._base(True), **arrays}) is None
    derived = ex._derived(arrays, True, heads, {**ex._known})
    assert derived is not None
    assert len(inferences) > 1
    assert_derived_as_imperative(ex, arrays, loss, heads, derived, {**ex._known})


def test_feeds_bind_the_symbolic_dimensions_or_contradict_them() -> None:
    mx = mxnet()
    f32 = np.dtype(np.float32)
    declared: dict[str, Any] = {"x": (("N", 3), f32), "y": (("N", "N"), f32), "s": ((), f32)}
    x, y = mx.nd.zeros((4, 3)), mx.nd.zeros((4, 4))
    bound = _bound_shapes(declared, {"x": x, "y": y})
    assert bound is not None
    assert bound[0] == {"x": (4, 3), "y": (4, 4), "s": (1,)}  # a scalar as MXNet holds it
    assert set(bound[1]) == set(bound[0])
    assert _bound_shapes(declared, {"x": x, "y": mx.nd.zeros((5, 5))}) is None  # N twice
    assert _bound_shapes(declared, {"x": mx.nd.zeros((4, 2))}) is None  # a fixed size
    assert _bound_shapes(declared, {"x": mx.nd.zeros((4, 3), dtype="float64")}) is None
    unbound = _bound_shapes(declared, {})
    assert unbound is not None and "x" not in unbound[0] and unbound[0]["s"] == (1,)
