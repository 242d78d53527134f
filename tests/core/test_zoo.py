"""The model zoo: valid, shaped, seeded models; the onnx package's light models."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from d5core.errors import UsageError
from d5core.lv1 import zoo
from d5core.onnx.network import D5_IR_VERSION, D5_OPSET, Network

REFERENCE_OPS = {
    "Gemm", "MatMul", "Conv", "ConvTranspose", "Relu", "LeakyRelu", "Sigmoid", "Tanh",
    "Softmax", "LogSoftmax", "MaxPool", "AveragePool", "GlobalAveragePool",
    "BatchNormalization", "Dropout", "Add", "Sub", "Mul", "Div", "Sum", "Reshape",
    "Flatten", "Transpose", "Concat", "Squeeze", "Unsqueeze", "Identity",
}  # fmt: skip

SHAPES = {
    "mlp": (784,),
    "lenet5": (1, 28, 28),
    "resnet20": (3, 32, 32),
    "resnet44": (3, 32, 32),
    "resnet56": (3, 32, 32),
    "vgg": (3, 32, 32),
}


@pytest.mark.parametrize("name", sorted(SHAPES))  # sequence models: test_zoo_sequence.py
def test_zoo_model_passes_checker_and_shape_inference_with_documented_shapes(name: str) -> None:
    model = zoo.ZOO[name]()
    onnx.checker.check_model(model, full_check=True)
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, check_type=True)
    assert model.ir_version == D5_IR_VERSION
    assert [(o.domain, o.version) for o in model.opset_import] == [("", D5_OPSET)]
    assert {n.op_type for n in model.graph.node} <= REFERENCE_OPS
    net = Network(inferred)
    assert [(i.name, i.shape, i.dtype) for i in net.inputs] == [
        ("input", (None, *SHAPES[name]), "float32")
    ]
    assert [(o.name, o.shape) for o in net.outputs] == [("output", (None, 10))]
    assert net.model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"
    # every intermediate got a shape
    assert len(inferred.graph.value_info) >= len(model.graph.node) - 1


@pytest.mark.parametrize("name", ["mlp", "lenet5", "resnet20", "vgg"])
def test_same_seed_gives_identical_model_and_another_seed_differs(name: str) -> None:
    a, b, c = zoo.ZOO[name](seed=0), zoo.ZOO[name](seed=0), zoo.ZOO[name](seed=1)
    assert a.SerializeToString() == b.SerializeToString()
    assert a.SerializeToString() != c.SerializeToString()
    assert a.graph.node == c.graph.node


def test_builders_honour_batch_classes_and_input_shape() -> None:
    net = zoo.build("lenet5", batch=4, classes=3, input_shape=(3, 16, 16))
    assert net.inputs[0].shape == (4, 3, 16, 16)
    assert net.outputs[0].shape == (4, 3)
    assert zoo.build("mlp", hidden=(7,)).parameters["gemm0.weight"].shape == (7, 784)
    vgg = zoo.build("vgg", config=[8, "M", 16, "M"])
    assert vgg.parameters["gemm0.weight"].shape == (10, 16 * 8 * 8)


def test_resnet_depth_gives_6n_plus_2_weighted_layers() -> None:
    for name, depth in [("resnet20", 20), ("resnet44", 44), ("resnet56", 56)]:
        net = zoo.build(name)
        convs = [n for n in net.nodes if n.op_type == "Conv"]
        shortcuts = [n for n in convs if list(n.attribute[0].ints) == [1, 1]]
        assert len(convs) - len(shortcuts) + 1 == depth
        assert len(shortcuts) == 2


def test_he_initialisation_and_batchnorm_defaults() -> None:
    params = zoo.build("resnet56", seed=3).parameters
    w = params["conv5.weight"]  # 32x32x3x3 in stage 2
    assert w.std() == pytest.approx(np.sqrt(2.0 / (w.shape[1] * 9)), rel=0.05)
    assert np.all(params["batchnormalization0.scale"] == 1)
    assert np.all(params["batchnormalization0.var"] == 1)
    assert np.all(params["batchnormalization0.mean"] == 0)
    assert np.all(zoo.build("lenet5").parameters["gemm0.bias"] == 0)


def test_build_unknown_name_is_one_line_usage_error_listing_names() -> None:
    with pytest.raises(
        UsageError, match=r"unknown model 'resnet18'; choose one of .*resnet20"
    ) as e:
        zoo.build("resnet18")
    assert "\n" not in str(e.value)
    with pytest.raises(UsageError, match="takes no option 'depth'"):
        zoo.build("resnet20", depth=32)


def test_model_names_list_the_builtin_zoo() -> None:
    assert set(zoo.ZOO) <= set(zoo.model_names())


def test_build_loads_an_onnx_path(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = zoo.build("mlp").save(tmp_path / "m.onnx")
    assert zoo.build(str(path)).name == "mlp"


def test_light_models_all_exist() -> None:
    assert set(zoo.LIGHT_MODELS) == {
        "resnet50", "vgg19", "densenet121", "inception_v1", "inception_v2",
        "squeezenet", "shufflenet", "alexnet", "zfnet512",
    }  # fmt: skip
    from pathlib import Path

    assert all(Path(p).is_file() for p in zoo.LIGHT_MODELS.values())


def test_light_resnet50_loads_with_expected_output_and_documented_input() -> None:
    model, expected = zoo.light_model("resnet50")
    assert expected.shape == (1, 1000)
    assert expected.dtype == np.float32
    feeds = zoo.light_inputs(model)
    x = feeds["gpu_0/data_0"]
    assert x.shape == (1, 3, 224, 224)
    assert x.reshape(-1)[1] == pytest.approx(1 / x.size)
