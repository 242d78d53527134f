"""The model zoo: networks built with ``onnx.helper``, and the onnx package's light models.

Every builder takes ``input_shape`` (without the batch), ``classes``, ``seed`` and
``batch`` (``None`` gives a symbolic batch dimension ``"N"``) and returns an
``onnx.ModelProto`` at opset :data:`D5_OPSET` and IR :data:`D5_IR_VERSION` that uses only
level-0 reference operators. Weights are drawn from ``numpy.random.default_rng(seed)``:
He (Kaiming) normal for Conv and Gemm weights, zero biases, BatchNormalization with scale
1, bias 0, mean 0 and variance 1. Nothing is downloaded.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from d5core.errors import UsageError
from d5core.lv1.zoo_sequence import bert, gpt, lstm, vit
from d5core.onnx.network import D5_IR_VERSION, D5_OPSET, Network

__all__ = [
    "LIGHT_MODELS",
    "VGG_DEFAULT",
    "ZOO",
    "build",
    "lenet5",
    "light_inputs",
    "light_model",
    "mlp",
    "model_names",
    "resnet",
    "resnet20",
    "resnet44",
    "resnet56",
    "vgg",
]

#: The default VGG configuration: channel counts, ``"M"`` for a 2x2 max pool.
VGG_DEFAULT: tuple[int | str, ...] = (32, "M", 64, "M", 128, 128, "M")


class _Builder:
    """Collects nodes and seeded initializers of one graph."""

    def __init__(self, name: str, seed: int) -> None:
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count: dict[str, int] = {}

    def _name(self, op: str) -> str:
        k = self.count.get(op, 0)
        self.count[op] = k + 1
        return f"{op.lower()}{k}"

    def param(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(value.astype(np.float32), name))
        return name

    def he(self, name: str, shape: tuple[int, ...], fan_in: int) -> str:
        std = np.sqrt(2.0 / fan_in)
        return self.param(name, self.rng.standard_normal(shape) * std)

    def node(self, op: str, inputs: Sequence[str], **attrs: Any) -> str:
        name = self._name(op)
        self.nodes.append(helper.make_node(op, list(inputs), [name], name=name, **attrs))
        return name

    def conv(
        self, x: str, cin: int, cout: int, k: int, *, stride: int = 1, pad: int = 0,
        bias: bool = True,
    ) -> str:  # fmt: skip
        base = f"conv{self.count.get('Conv', 0)}"
        inputs = [x, self.he(f"{base}.weight", (cout, cin, k, k), cin * k * k)]
        if bias:
            inputs.append(self.param(f"{base}.bias", np.zeros(cout)))
        return self.node(
            "Conv", inputs, kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4
        )

    def bn(self, x: str, c: int) -> str:
        base = f"batchnormalization{self.count.get('BatchNormalization', 0)}"
        inputs = [
            x,
            self.param(f"{base}.scale", np.ones(c)),
            self.param(f"{base}.bias", np.zeros(c)),
            self.param(f"{base}.mean", np.zeros(c)),
            self.param(f"{base}.var", np.ones(c)),
        ]
        return self.node("BatchNormalization", inputs, epsilon=1e-5)

    def gemm(self, x: str, fin: int, fout: int) -> str:
        base = f"gemm{self.count.get('Gemm', 0)}"
        w = self.he(f"{base}.weight", (fout, fin), fin)
        b = self.param(f"{base}.bias", np.zeros(fout))
        return self.node("Gemm", [x, w, b], transB=1)

    def maxpool(self, x: str) -> str:
        return self.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])

    def model(
        self, x: str, y: str, input_shape: Sequence[int], classes: int, batch: int | None
    ) -> onnx.ModelProto:
        n: int | str = "N" if batch is None else int(batch)
        last = self.nodes[-1]
        assert last.output[0] == y
        last.output[0] = "output"
        graph = helper.make_graph(
            self.nodes,
            self.name,
            [helper.make_tensor_value_info(x, TensorProto.FLOAT, [n, *input_shape])],
            [helper.make_tensor_value_info("output", TensorProto.FLOAT, [n, classes])],
            self.inits,
        )
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", D5_OPSET)], producer_name="d5"
        )
        model.ir_version = D5_IR_VERSION
        return model


def _check_args(name: str, input_shape: Sequence[int], rank: int, classes: int) -> None:
    if len(input_shape) != rank or any(int(d) <= 0 for d in input_shape):
        raise UsageError(
            f"{name} needs input_shape of {rank} positive dimensions, not {tuple(input_shape)}"
        )
    if classes <= 0:
        raise UsageError(f"{name} needs a positive number of classes, not {classes}")


def _check_sizes(model: str, option: str, sizes: object) -> None:
    """Raise a one-line :class:`UsageError` unless ``sizes`` is a list of positive integers."""
    ok = isinstance(sizes, list | tuple) and all(
        isinstance(v, int | np.integer) and not isinstance(v, bool) and v > 0 for v in sizes
    )
    if not ok:
        raise UsageError(
            f"{model} option {option} must be a list of positive layer sizes such as "
            f"[128, 64], not {sizes!r}"
        )


def mlp(
    *,
    input_shape: Sequence[int] = (784,),
    classes: int = 10,
    hidden: Sequence[int] = (128, 64),
    seed: int = 0,
    batch: int | None = None,
) -> onnx.ModelProto:
    """A multilayer perceptron: (Flatten →) [Gemm → Relu] per hidden size → Gemm.

    Input ``(N, *input_shape)``, output logits ``(N, classes)``.
    """
    if classes <= 0 or not input_shape or any(int(d) <= 0 for d in input_shape):
        raise UsageError(f"mlp needs positive input_shape and classes, not {input_shape}")
    _check_sizes("mlp", "hidden", hidden)
    b = _Builder("mlp", seed)
    x = "input"
    features = int(np.prod(input_shape))
    y = b.node("Flatten", [x], axis=1) if len(input_shape) > 1 else x
    for size in hidden:
        y = b.node("Relu", [b.gemm(y, features, int(size))])
        features = int(size)
    return b.model(x, b.gemm(y, features, classes), input_shape, classes, batch)


def lenet5(
    *,
    input_shape: Sequence[int] = (1, 28, 28),
    classes: int = 10,
    seed: int = 0,
    batch: int | None = None,
) -> onnx.ModelProto:
    """LeNet-5: Conv 5x5 (6, pad 2) → Relu → MaxPool → Conv 5x5 (16) → Relu → MaxPool →
    Flatten → Gemm 120 → Relu → Gemm 84 → Relu → Gemm ``classes``."""
    _check_args("lenet5", input_shape, 3, classes)
    c, h, w = (int(d) for d in input_shape)
    h2, w2 = (h // 2 - 4) // 2, (w // 2 - 4) // 2
    if h2 < 1 or w2 < 1:
        raise UsageError(f"lenet5 needs images of at least 12x12, not {h}x{w}")
    b = _Builder("lenet5", seed)
    y = b.maxpool(b.node("Relu", [b.conv("input", c, 6, 5, pad=2)]))
    y = b.maxpool(b.node("Relu", [b.conv(y, 6, 16, 5)]))
    y = b.node("Flatten", [y], axis=1)
    y = b.node("Relu", [b.gemm(y, 16 * h2 * w2, 120)])
    y = b.node("Relu", [b.gemm(y, 120, 84)])
    return b.model("input", b.gemm(y, 84, classes), input_shape, classes, batch)


def resnet(
    *,
    depth: int = 20,
    input_shape: Sequence[int] = (3, 32, 32),
    classes: int = 10,
    seed: int = 0,
    batch: int | None = None,
) -> onnx.ModelProto:
    """A CIFAR ResNet (He et al. 2016, section 4.2) of ``depth`` = 6n + 2 layers.

    Conv 3x3 (16) → BN → Relu, then three stages of n basic blocks with 16, 32 and 64
    channels (the first block of stages 2 and 3 has stride 2 and a stride-2 1x1
    projection shortcut with BN), then GlobalAveragePool → Flatten → Gemm ``classes``.
    A basic block: Conv 3x3 → BN → Relu → Conv 3x3 → BN, Add shortcut, Relu.
    """
    if depth < 8 or (depth - 2) % 6:
        raise UsageError(f"resnet depth must be 6n + 2 (20, 44, 56, ...), not {depth}")
    _check_args(f"resnet{depth}", input_shape, 3, classes)
    b = _Builder(f"resnet{depth}", seed)
    y = b.node("Relu", [b.bn(b.conv("input", int(input_shape[0]), 16, 3, pad=1, bias=False), 16)])
    cin = 16
    for stage, cout in enumerate((16, 32, 64)):
        for block in range((depth - 2) // 6):
            stride = 2 if stage > 0 and block == 0 else 1
            z = b.conv(y, cin, cout, 3, stride=stride, pad=1, bias=False)
            z = b.node("Relu", [b.bn(z, cout)])
            z = b.bn(b.conv(z, cout, cout, 3, pad=1, bias=False), cout)
            shortcut = y
            if stride != 1 or cin != cout:
                shortcut = b.bn(b.conv(y, cin, cout, 1, stride=stride, bias=False), cout)
            y = b.node("Relu", [b.node("Add", [z, shortcut])])
            cin = cout
    y = b.node("Flatten", [b.node("GlobalAveragePool", [y])], axis=1)
    return b.model("input", b.gemm(y, cin, classes), input_shape, classes, batch)


def resnet20(**kwargs: Any) -> onnx.ModelProto:
    """:func:`resnet` of depth 20 (3 blocks per stage)."""
    return resnet(depth=20, **kwargs)


def resnet44(**kwargs: Any) -> onnx.ModelProto:
    """:func:`resnet` of depth 44 (7 blocks per stage)."""
    return resnet(depth=44, **kwargs)


def resnet56(**kwargs: Any) -> onnx.ModelProto:
    """:func:`resnet` of depth 56 (9 blocks per stage)."""
    return resnet(depth=56, **kwargs)


def vgg(
    *,
    config: Sequence[int | str] = VGG_DEFAULT,
    input_shape: Sequence[int] = (3, 32, 32),
    classes: int = 10,
    seed: int = 0,
    batch: int | None = None,
) -> onnx.ModelProto:
    """A small VGG-style CNN: per number in ``config`` Conv 3x3 (pad 1) → BN → Relu, per
    ``"M"`` a 2x2 MaxPool; then Flatten → Gemm ``classes``."""
    _check_args("vgg", input_shape, 3, classes)
    c, h, w = (int(d) for d in input_shape)
    b = _Builder("vgg", seed)
    y = "input"
    for item in config:
        if item == "M":
            y, h, w = b.maxpool(y), h // 2, w // 2
            if h < 1 or w < 1:
                raise UsageError(f"vgg config {list(config)} pools a {input_shape} image away")
        elif isinstance(item, int) and item > 0:
            y = b.node("Relu", [b.bn(b.conv(y, c, item, 3, pad=1, bias=False), item)])
            c = item
        else:
            raise UsageError(f"vgg config items are channel counts or 'M', not {item!r}")
    y = b.node("Flatten", [y], axis=1)
    return b.model("input", b.gemm(y, c * h * w, classes), input_shape, classes, batch)


#: The built-in zoo: model name to builder.
ZOO: dict[str, Callable[..., onnx.ModelProto]] = {
    "mlp": mlp,
    "lenet5": lenet5,
    "resnet20": resnet20,
    "resnet44": resnet44,
    "resnet56": resnet56,
    "vgg": vgg,
    # sequence models (d5core.lv1.zoo_sequence)
    "bert": bert,
    "gpt": gpt,
    "vit": vit,
    "lstm": lstm,
}

_LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"

#: Full-size architectures shipped in the onnx wheel (opset 9): name to ``.onnx`` path.
LIGHT_MODELS: dict[str, str] = {
    name: str(_LIGHT_DIR / f"light_{stem}.onnx")
    for name, stem in {
        "resnet50": "resnet50",
        "vgg19": "vgg19",
        "densenet121": "densenet121",
        "inception_v1": "inception_v1",
        "inception_v2": "inception_v2",
        "squeezenet": "squeezenet",
        "shufflenet": "shufflenet",
        "alexnet": "bvlc_alexnet",
        "zfnet512": "zfnet512",
    }.items()
}


def light_inputs(model: onnx.ModelProto | Network) -> dict[str, np.ndarray]:
    """The inputs the light models' expected outputs were computed from.

    As ``onnx.backend.test.runner.Runner.generate_dummy_data(random=False)``: for each
    graph input that is not an initializer, the shape with unknown dimensions set to 1,
    and the values ``arange(n).reshape(shape) / n`` as float32.
    """
    proto = model.model if isinstance(model, Network) else model
    inits = {t.name for t in proto.graph.initializer}
    feeds: dict[str, np.ndarray] = {}
    for x in proto.graph.input:
        if x.name in inits:
            continue
        shape = tuple(
            int(d.dim_value) if d.HasField("dim_value") else 1 for d in x.type.tensor_type.shape.dim
        )
        n = int(np.prod(shape))
        feeds[x.name] = (np.arange(n).reshape(shape) / n).astype(np.float32)
    return feeds


def light_model(name: str) -> tuple[onnx.ModelProto, np.ndarray]:
    """A light model and its expected first output for :func:`light_inputs`."""
    if name not in LIGHT_MODELS:
        raise UsageError(
            f"unknown light model {name!r}; choose one of {', '.join(sorted(LIGHT_MODELS))}"
        )
    path = Path(LIGHT_MODELS[name])
    expected_path = path.with_name(f"{path.stem}_output_0.pb")
    if not path.is_file() or not expected_path.is_file():
        raise UsageError(
            f"light model {name!r} is missing from the installed onnx ({path}); install an "
            f"onnx wheel that ships its backend test data"
        )
    model = Network.load(path).model
    tensor = TensorProto()
    tensor.ParseFromString(expected_path.read_bytes())
    return model, np.array(numpy_helper.to_array(tensor), copy=True)


def _zoo() -> dict[str, Callable[..., Any]]:
    """Every zoo model, from the ``d5_model_zoo`` hook: :data:`ZOO` comes from d5's
    internal ``builtins`` plugin, the rest from other plugins; clashes are reported there."""
    from d5core.plugins import get_plugin_manager

    return get_plugin_manager().merged("d5_model_zoo")


def model_names() -> list[str]:
    """Names of the zoo models: built-in ones and those plugins contribute (sorted).

    Light models are listed apart, in :data:`LIGHT_MODELS`.
    """
    return sorted(_zoo())


def build(name: str, **kwargs: Any) -> Network:
    """Build the zoo model ``name`` (a light model or an ``.onnx`` path also work).

    ``kwargs`` go to the builder (``input_shape``, ``classes``, ``seed``, ``batch``, ...).
    """
    if name.endswith(".onnx"):
        if kwargs:
            raise UsageError(f"{name} is a file: options {sorted(kwargs)} do not apply to it")
        return Network.load(name)
    zoo = _zoo()
    if name not in zoo:
        if name in LIGHT_MODELS and not kwargs:
            return Network(light_model(name)[0], source=f"light model {name!r}")
        raise UsageError(
            f"unknown model {name!r}; choose one of {', '.join(sorted(zoo))}, a light "
            f"model ({', '.join(sorted(LIGHT_MODELS))}) or a path to an .onnx file"
        )
    builder = zoo[name]
    _check_kwargs(name, builder, kwargs)
    made = builder(**kwargs)
    if isinstance(made, Network):
        return made
    if not isinstance(made, onnx.ModelProto):
        raise UsageError(
            f"the builder of model {name!r} returned {type(made).__name__}, not an "
            f"onnx.ModelProto; fix its plugin"
        )
    return Network(made, source=f"zoo model {name!r}")


def _check_kwargs(name: str, builder: Callable[..., Any], kwargs: Mapping[str, Any]) -> None:
    try:
        signature = inspect.signature(builder)
    except (TypeError, ValueError):
        return
    params = signature.parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        params = inspect.signature(resnet).parameters.values() if name in ZOO else params
        if any(p.kind is p.VAR_KEYWORD for p in params):
            return
    accepted = {p.name for p in params} - ({"depth"} if name.startswith("resnet") else set())
    unknown = sorted(set(kwargs) - accepted)
    if unknown:
        raise UsageError(
            f"model {name!r} takes no option {unknown[0]!r}; it takes {', '.join(sorted(accepted))}"
        )
