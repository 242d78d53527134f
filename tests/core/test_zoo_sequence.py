"""The zoo's sequence models (bert, gpt, vit, lstm): valid ONNX, documented shapes and
options, seeded weights and token-id feeds below the vocabulary. (The reference executor
running them lives with the numpy plugin's tests: test_numpy_zoo_sequence.py.)"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest

from d5core.errors import UsageError
from d5core.lv1 import zoo
from d5core.lv1 import zoo_sequence as zs
from d5core.lv1.runner import make_feeds, with_loss
from d5core.onnx.network import D5_IR_VERSION, D5_OPSET, Network
from d5core.testing.sequence_forward import TINY

SEQUENCE = ("bert", "gpt", "vit", "lstm")


#: Graph input and output (with the symbolic batch) of each model's defaults.
DEFAULT_IO = {
    "gpt": (("input_ids", (None, 64), "int64"), (None, 256, 64)),
    "bert": (("input_ids", (None, 64), "int64"), (None, 2)),
    "vit": (("input", (None, 3, 32, 32), "float32"), (None, 10)),
    "lstm": (("input_ids", (None, 32), "int64"), (None, 2)),
}


@pytest.mark.parametrize("name", SEQUENCE)
def test_default_model_passes_checker_and_strict_shape_inference(name: str) -> None:
    model = zoo.ZOO[name]()
    onnx.checker.check_model(model, full_check=True)
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, check_type=True)
    assert model.ir_version == D5_IR_VERSION
    assert [(o.domain, o.version) for o in model.opset_import] == [("", D5_OPSET)]
    for node in model.graph.node:  # standard operators, defined at opset 17
        assert onnx.defs.get_schema(node.op_type, D5_OPSET, "").since_version <= D5_OPSET
    net = Network(inferred)
    (x, out) = DEFAULT_IO[name]
    assert [(i.name, i.shape, i.dtype) for i in net.inputs] == [x]
    assert [(o.name, o.shape) for o in net.outputs] == [("output", out)]
    assert set(net.trainable) == set(net.parameters), "constants are nodes, not weights"


def test_sequence_models_are_listed_by_name() -> None:
    assert set(SEQUENCE) <= set(zoo.model_names())
    assert zoo.build("gpt", **TINY["gpt"]).name == "gpt"


@pytest.mark.parametrize("name", SEQUENCE)
def test_same_seed_gives_the_same_model_and_another_seed_other_weights(name: str) -> None:
    a, b = zoo.ZOO[name](seed=0, **TINY[name]), zoo.ZOO[name](seed=0, **TINY[name])
    c = zoo.ZOO[name](seed=1, **TINY[name])
    assert a.SerializeToString() == b.SerializeToString()
    assert a.graph.node == c.graph.node
    assert a.graph.initializer != c.graph.initializer


def test_options_size_the_weights() -> None:
    gpt = zoo.build("gpt", vocab=30, seq_len=7, hidden=12, heads=3, layers=3, ff=20).parameters
    assert gpt["embed.tokens"].shape == (30, 12)
    assert gpt["embed.positions"].shape == (7, 12)
    assert gpt["block2.mlp.up.weight"].shape == (12, 20)
    assert gpt["head.weight"].shape == (12, 30)
    assert "block3.ln1.scale" not in gpt
    tied = zoo.build("gpt", vocab=30, hidden=12, heads=3, tied=True)
    assert "head.weight" not in tied.parameters
    assert tied.outputs[0].shape == (None, 30, 64)
    last = zoo.build("gpt", vocab=30, seq_len=7, vocab_last=True, batch=2)
    assert last.outputs[0].shape == (2, 7, 30)
    bert = zoo.build("bert", vocab=40, classes=5, hidden=16, heads=2)
    assert bert.parameters["classifier.weight"].shape == (5, 16)
    assert bert.parameters["layer1.mlp.up.weight"].shape == (16, 64)
    assert "Equal" not in {n.op_type for n in zoo.build("bert", padding_mask=False).nodes}
    vit = zoo.build("vit", image_size=12, patch=4, channels=1, hidden=8, heads=2)
    assert vit.parameters["embed.positions"].shape == (10, 8)  # 9 patches and the class
    assert vit.parameters["patch.weight"].shape == (8, 1, 4, 4)
    lstm = zoo.build("lstm", vocab=20, embed=6, hidden=7, layers=2, bidirectional=True)
    assert lstm.parameters["lstm0.W"].shape == (2, 28, 6)
    assert lstm.parameters["lstm1.W"].shape == (2, 28, 14)
    assert lstm.parameters["lstm1.B"].shape == (2, 56)
    assert lstm.parameters["head.weight"].shape == (2, 14)


def test_recipe_options_input_shape_and_classes_set_length_and_vocabulary() -> None:
    gpt = zoo.build("gpt", input_shape=(16,), classes=30, seed=2)
    assert gpt.inputs[0].shape == (None, 16)
    assert gpt.outputs[0].shape == (None, 30, 16)
    assert zoo.build("gpt", vocab=30, classes=30).outputs[0].shape == (None, 30, 64)
    assert zoo.build("bert", input_shape=(9,)).inputs[0].shape == (None, 9)
    assert zoo.build("lstm", input_shape=(9,)).inputs[0].shape == (None, 9)
    assert zoo.build("vit", input_shape=(1, 8, 8), patch=2).inputs[0].shape == (None, 1, 8, 8)


def test_initialisation_is_as_documented() -> None:
    p = zoo.build("gpt", vocab=500, hidden=64, init_std=0.05).parameters
    assert p["embed.tokens"].std() == pytest.approx(0.05, rel=0.05)
    assert np.all(p["block0.ln1.scale"] == 1) and np.all(p["block0.ln1.bias"] == 0)
    assert np.all(p["block0.attn.query.bias"] == 0)
    lstm = zoo.build("lstm", hidden=16).parameters
    assert np.abs(lstm["lstm0.R"]).max() <= 1 / 4


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("gpt", {"hidden": 10, "heads": 4}, "gpt option hidden (10) must be a multiple of heads (4)"),
        ("gpt", {"vocab": 10, "classes": 12}, "gpt option vocab=10 disagrees with classes (12)"),
        ("gpt", {"seq_len": 0}, "gpt option seq_len must be a positive integer, not 0"),
        ("gpt", {"layers": 1.5}, "gpt option layers must be a positive integer, not 1.5"),
        ("gpt", {"tied": "yes"}, "gpt option tied must be true or false, not 'yes'"),
        ("gpt", {"init_std": -1}, "gpt option init_std must be a positive number"),
        ("gpt", {"input_shape": (4, 4)}, "gpt takes input_shape (seq_len,) of token ids"),
        ("gpt", {"seq_len": 8, "input_shape": (9,)}, "seq_len=8 disagrees with input_shape (9)"),
        ("gpt", {"heads": 2, "dropout": 0.1}, "model 'gpt' takes no option 'dropout'"),
        ("bert", {"classes": 0}, "bert option classes must be a positive integer, not 0"),
        ("bert", {"padding_mask": 1}, "bert option padding_mask must be true or false"),
        ("vit", {"image_size": 10, "patch": 4}, "vit option image_size (10) must be a multiple"),
        ("vit", {"input_shape": (3, 8, 4)}, "vit takes input_shape (C, H, H) of square images"),
        ("lstm", {"bidirectional": "no"}, "lstm option bidirectional must be true or false"),
        ("lstm", {"hidden": -3}, "lstm option hidden must be a positive integer, not -3"),
        ("lstm", {"batch": 0}, "option batch must be a positive integer, not 0"),
    ],
)  # fmt: skip
def test_bad_options_are_one_line_usage_errors(
    name: str, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(UsageError) as error:
        zoo.build(name, **options)
    assert message in str(error.value)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("name", ["gpt", "bert", "lstm"])
def test_generated_token_ids_are_below_the_vocabulary(name: str) -> None:
    net = (
        zoo.build(name, vocab=7, seq_len=50, classes=3)
        if name != "gpt"
        else zoo.build(name, vocab=7, seq_len=50)
    )
    ids = make_feeds(net, 4, seed=1)["input_ids"]
    assert ids.dtype == np.int64 and ids.shape == (4, 50)
    assert set(np.unique(ids)) == set(range(7))
    trained, _ = with_loss(net)
    labels = make_feeds(trained, 40, seed=1)["labels"]
    high = 7 if name == "gpt" else 3  # gpt: next-token labels (N, seq); else classes
    assert labels.shape == ((40, 50) if name == "gpt" else (40,))
    assert set(np.unique(labels)) == set(range(high))


def test_a_bad_input_bound_in_the_metadata_is_a_usage_error() -> None:
    model = zs.gpt(**TINY["gpt"])
    model.metadata_props[0].value = "many"
    with pytest.raises(UsageError, match=r"d5.input_high.input_ids='many' must be a positive"):
        make_feeds(Network(model), 2)
