"""Sequence models of the zoo: a BERT-style encoder, a GPT-style causal decoder, a
ViT-style image classifier and an LSTM classifier.

Each builder returns an ``onnx.ModelProto`` at opset :data:`D5_OPSET` (17) made of
standard ONNX operators only, with weights drawn from ``numpy.random.default_rng(seed)``.
Every initializer is a trainable float32 parameter; the constants a graph needs (shapes,
axes, scales, the causal mask) are ``Constant`` nodes, so they never count as weights.

Token models take int64 ids ``input_ids`` of shape ``(N, seq_len)`` (``N`` is symbolic
unless ``batch`` fixes it) and write the model metadata entry
``d5.input_high.input_ids = <vocab>``: dataset-less runs (``d5 bench net``, ``d5 validate
net``) draw that input's values from ``[0, vocab)``
(:func:`d5core.lv1.runner.make_feeds` reads every ``d5.input_high.<input>`` entry).

Shared pieces:

* Multi-head self-attention: ``MatMul`` projections for Q, K and V (weights
  ``(hidden, hidden)`` and biases), ``Reshape`` to ``(N, seq, heads, hidden/heads)`` and
  ``Transpose`` to heads first, batched ``MatMul`` of Q and K transposed, ``Mul`` by
  ``1/sqrt(hidden/heads)``, an optional mask through ``Where`` (masked scores become
  ``-1e9``), ``Softmax`` on the last axis, ``MatMul`` with V, heads merged back by
  ``Transpose`` and ``Reshape``, and an output projection.
* The MLP: ``MatMul``/``Add`` to ``ff`` units, GELU in the exact ``Erf`` form that Hugging
  Face exports (``x * 0.5 * (1 + Erf(x / sqrt(2)))``; ONNX's ``Gelu`` operator needs opset
  20), ``MatMul``/``Add`` back to ``hidden``.
* ``LayerNormalization`` on the last axis, epsilon 1e-5, scale 1 and bias 0 at start.
* Transformer weights and embeddings are normal with standard deviation ``init_std``,
  biases zero. The LSTM's weights and biases are uniform in ``±1/sqrt(hidden)`` (as
  PyTorch initializes them); Gemm heads of the LSTM are He normal.

Builders also take the zoo's common ``input_shape`` and ``classes`` (what a training
recipe passes from its dataset): for the token models ``input_shape`` is ``(seq_len,)``,
for :func:`gpt` ``classes`` is the vocabulary; a value given both ways must agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from d5core.errors import UsageError
from d5core.onnx.network import D5_IR_VERSION, D5_OPSET

__all__ = ["INPUT_HIGH_KEY", "bert", "gpt", "lstm", "vit"]

#: Prefix of the model metadata key giving an integer input's exclusive upper bound:
#: ``d5.input_high.<input name>`` = ``"<high>"``.
INPUT_HIGH_KEY = "d5.input_high."

_NEG = -1e9


class _Graph:
    """Collects nodes, seeded float32 parameters and constant nodes of one graph."""

    def __init__(self, name: str, seed: int, init_std: float = 0.02) -> None:
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.init_std = float(init_std)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count: dict[str, int] = {}
        self.constants: dict[tuple[Any, ...], str] = {}

    def _name(self, op: str) -> str:
        k = self.count.get(op, 0)
        self.count[op] = k + 1
        return f"{op.lower()}{k}"

    def node(self, op: str, inputs: Sequence[str], *, outputs: int = 1, **attrs: Any) -> str:
        """Append a node; return its (first) output's name."""
        name = self._name(op)
        names = [name] if outputs == 1 else [f"{name}.{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op, list(inputs), names, name=name, **attrs))
        return names[0]

    def param(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=np.float32), name))
        return name

    def normal(self, name: str, shape: tuple[int, ...]) -> str:
        return self.param(name, self.rng.standard_normal(shape) * self.init_std)

    def const(self, value: Any, dtype: type = np.int64) -> str:
        """A ``Constant`` node holding ``value`` (reused for an equal value and dtype)."""
        array: np.ndarray = np.asarray(value, dtype=dtype)
        key = (array.dtype.str, array.shape, array.tobytes())
        if key not in self.constants:
            tensor = numpy_helper.from_array(array, f"const{len(self.constants)}")
            self.constants[key] = self.node("Constant", [], value=tensor)
        return self.constants[key]

    def scalar(self, value: float) -> str:
        return self.const(value, np.float32)

    def linear(self, x: str, base: str, fin: int, fout: int) -> str:
        """``x @ W + b`` on the last axis (``MatMul`` then ``Add``)."""
        w = self.normal(f"{base}.weight", (fin, fout))
        b = self.param(f"{base}.bias", np.zeros(fout))
        return self.node("Add", [self.node("MatMul", [x, w]), b])

    def layer_norm(self, x: str, base: str, size: int) -> str:
        scale = self.param(f"{base}.scale", np.ones(size))
        bias = self.param(f"{base}.bias", np.zeros(size))
        return self.node("LayerNormalization", [x, scale, bias], axis=-1, epsilon=1e-5)

    def gelu(self, x: str) -> str:
        """GELU as Hugging Face exports it: ``x * 0.5 * (1 + Erf(x / sqrt(2)))``."""
        erf = self.node("Erf", [self.node("Div", [x, self.scalar(float(np.sqrt(2.0)))])])
        return self.node("Mul", [self.node("Mul", [x, self.scalar(0.5)]),
                                 self.node("Add", [erf, self.scalar(1.0)])])  # fmt: skip

    def attention(
        self, x: str, base: str, hidden: int, heads: int, mask: tuple[str, str] | None
    ) -> str:
        """Multi-head self-attention of ``x`` ``(N, seq, hidden)``.

        ``mask`` is ``(kind, tensor)``: ``("keep", m)`` keeps scores where the boolean
        ``m`` is true (``Where(m, scores, -1e9)``), ``("drop", m)`` drops them there.
        """
        dh = hidden // heads
        split = self.const([0, 0, heads, dh])
        q, k, v = (
            self.node("Reshape", [self.linear(x, f"{base}.{p}", hidden, hidden), split])
            for p in ("query", "key", "value")
        )
        q = self.node("Transpose", [q], perm=[0, 2, 1, 3])
        k = self.node("Transpose", [k], perm=[0, 2, 3, 1])
        v = self.node("Transpose", [v], perm=[0, 2, 1, 3])
        scores = self.node("Mul", [self.node("MatMul", [q, k]), self.scalar(1.0 / np.sqrt(dh))])
        if mask is not None:
            kind, m = mask
            neg = self.scalar(_NEG)
            pair = [scores, neg] if kind == "keep" else [neg, scores]
            scores = self.node("Where", [m, *pair])
        probs = self.node("Softmax", [scores], axis=-1)
        context = self.node("Transpose", [self.node("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        merged = self.node("Reshape", [context, self.const([0, 0, hidden])])
        return self.linear(merged, f"{base}.output", hidden, hidden)

    def mlp(self, x: str, base: str, hidden: int, ff: int) -> str:
        up = self.gelu(self.linear(x, f"{base}.up", hidden, ff))
        return self.linear(up, f"{base}.down", ff, hidden)

    def block(
        self, x: str, base: str, hidden: int, heads: int, ff: int,
        mask: tuple[str, str] | None, *, pre_ln: bool,
    ) -> str:  # fmt: skip
        """One encoder/decoder block: pre-LN (GPT, ViT) or post-LN (BERT)."""
        if pre_ln:
            a = self.attention(self.layer_norm(x, f"{base}.ln1", hidden), f"{base}.attn",
                               hidden, heads, mask)  # fmt: skip
            x = self.node("Add", [x, a])
            m = self.mlp(self.layer_norm(x, f"{base}.ln2", hidden), f"{base}.mlp", hidden, ff)
            return self.node("Add", [x, m])
        a = self.attention(x, f"{base}.attn", hidden, heads, mask)
        x = self.layer_norm(self.node("Add", [x, a]), f"{base}.ln1", hidden)
        m = self.mlp(x, f"{base}.mlp", hidden, ff)
        return self.layer_norm(self.node("Add", [x, m]), f"{base}.ln2", hidden)

    def model(
        self,
        inputs: Sequence[onnx.ValueInfoProto],
        y: str,
        out_shape: Sequence[int | str],
        metadata: dict[str, str] | None = None,
    ) -> onnx.ModelProto:
        last = next(n for n in reversed(self.nodes) if y in n.output)
        last.output[list(last.output).index(y)] = "output"
        graph = helper.make_graph(
            self.nodes,
            self.name,
            list(inputs),
            [helper.make_tensor_value_info("output", TensorProto.FLOAT, list(out_shape))],
            self.inits,
        )
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", D5_OPSET)], producer_name="d5"
        )
        model.ir_version = D5_IR_VERSION
        for key, value in (metadata or {}).items():
            entry = model.metadata_props.add()
            entry.key, entry.value = key, value
        return model


# -- option checks ---------------------------------------------------------------------


def _positive(model: str, **options: Any) -> None:
    for option, value in options.items():
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value <= 0:
            raise UsageError(f"{model} option {option} must be a positive integer, not {value!r}")


def _flags(model: str, **options: Any) -> None:
    for option, value in options.items():
        if not isinstance(value, bool):
            raise UsageError(f"{model} option {option} must be true or false, not {value!r}")


def _std(model: str, init_std: float) -> float:
    if isinstance(init_std, bool) or not isinstance(init_std, int | float) or init_std <= 0:
        raise UsageError(f"{model} option init_std must be a positive number, not {init_std!r}")
    return float(init_std)


def _seq_len(
    model: str, seq_len: int | None, input_shape: Sequence[int] | None, default: int = 64
) -> int:
    """``seq_len``, or the one dimension of ``input_shape``; both must agree."""
    shape_len = None
    if input_shape is not None:
        dims = tuple(input_shape)
        if len(dims) != 1:
            raise UsageError(
                f"{model} takes input_shape (seq_len,) of token ids, not {dims}; set seq_len"
            )
        shape_len = dims[0]
    return _agree(model, "seq_len", seq_len, "input_shape", shape_len, default)


def _agree(
    model: str, option: str, value: int | None, other: str, derived: int | None, default: int
) -> int:
    if value is not None and derived is not None and int(derived) != int(value):
        raise UsageError(
            f"{model} option {option}={value} disagrees with {other} ({derived}); give one"
        )
    chosen = value if value is not None else derived if derived is not None else default
    _positive(model, **{option: chosen})
    return int(chosen)


def _heads(model: str, hidden: int, heads: int) -> None:
    if hidden % heads:
        raise UsageError(f"{model} option hidden ({hidden}) must be a multiple of heads ({heads})")


def _batch(batch: int | None) -> int | str:
    if batch is None:
        return "N"
    _positive("the model", batch=batch)
    return int(batch)


def _ids(n: int | str, seq_len: int) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info("input_ids", TensorProto.INT64, [n, seq_len])


# -- the models ------------------------------------------------------------------------


def gpt(
    *,
    vocab: int | None = None,
    seq_len: int | None = None,
    hidden: int = 64,
    heads: int = 4,
    layers: int = 2,
    ff: int | None = None,
    tied: bool = False,
    vocab_last: bool = False,
    init_std: float = 0.02,
    seed: int = 0,
    input_shape: Sequence[int] | None = None,
    classes: int | None = None,
    batch: int | None = None,
) -> onnx.ModelProto:
    """A GPT-style causal decoder language model.

    ``input_ids`` int64 ``(N, seq_len)`` → token embedding (``Gather`` of a
    ``(vocab, hidden)`` table) + learned position embedding ``(seq_len, hidden)`` →
    ``layers`` pre-LN blocks [x + attention(LayerNorm(x)) with a causal mask, x +
    MLP(LayerNorm(x))] → final LayerNorm → logits through a ``(hidden, vocab)`` head
    (``tied=True`` uses the transposed token table instead; no bias).

    Output ``output``: logits of shape ``(N, vocab, seq_len)`` by default, the layout
    ONNX ``SoftmaxCrossEntropyLoss`` reads (scores ``(N, C, d1)`` with labels
    ``(N, d1)``), so a training loss over every position is ``add_loss("output")`` with
    int64 labels ``(N, seq_len)`` (the next token of each position). ``vocab_last=True``
    gives ``(N, seq_len, vocab)`` instead (as Hugging Face models do).

    The causal mask is a boolean ``(seq_len, seq_len)`` lower-triangular ``Constant``:
    scores above the diagonal become ``Where(mask, scores, -1e9)``.

    ``vocab`` defaults to ``classes`` (a recipe passes its dataset's number of classes)
    else 256; ``seq_len`` to ``input_shape[0]`` else 64; ``ff`` to ``4 * hidden``.
    """
    vocab = _agree("gpt", "vocab", vocab, "classes", classes, 256)
    seq = _seq_len("gpt", seq_len, input_shape)
    ff = 4 * hidden if ff is None and isinstance(hidden, int) else ff
    _positive("gpt", hidden=hidden, heads=heads, layers=layers, ff=ff)
    assert ff is not None
    _heads("gpt", hidden, heads)
    _flags("gpt", tied=tied, vocab_last=vocab_last)
    n = _batch(batch)
    g = _Graph("gpt", seed, _std("gpt", init_std))
    table = g.normal("embed.tokens", (vocab, hidden))
    x = g.node("Gather", [table, "input_ids"], axis=0)
    x = g.node("Add", [x, g.normal("embed.positions", (seq, hidden))])
    causal = g.const(np.tril(np.ones((seq, seq), dtype=bool)), np.bool_)
    for i in range(layers):
        x = g.block(x, f"block{i}", hidden, heads, ff, ("keep", causal), pre_ln=True)
    x = g.layer_norm(x, "ln_final", hidden)
    head = (
        g.node("Transpose", [table], perm=[1, 0])
        if tied
        else g.normal("head.weight", (hidden, vocab))
    )
    logits = g.node("MatMul", [x, head])
    shape: list[int | str] = [n, seq, vocab]
    if not vocab_last:
        logits = g.node("Transpose", [logits], perm=[0, 2, 1])
        shape = [n, vocab, seq]
    return g.model([_ids(n, seq)], logits, shape, {f"{INPUT_HIGH_KEY}input_ids": str(vocab)})


def bert(
    *,
    vocab: int = 1000,
    seq_len: int | None = None,
    hidden: int = 64,
    heads: int = 4,
    layers: int = 2,
    ff: int | None = None,
    classes: int = 2,
    padding_mask: bool = True,
    init_std: float = 0.02,
    seed: int = 0,
    input_shape: Sequence[int] | None = None,
    batch: int | None = None,
) -> onnx.ModelProto:
    """A BERT-style encoder with a classification head on the first token.

    ``input_ids`` int64 ``(N, seq_len)`` → token embedding (``Gather``) + learned
    position embedding → LayerNorm → ``layers`` post-LN blocks [LayerNorm(x +
    attention(x)), LayerNorm(x + MLP(x))] → the first token (``Gather`` index 0 on axis
    1) → pooler (``Gemm`` ``hidden`` → ``Tanh``) → ``Gemm`` to ``classes`` logits
    ``(N, classes)``.

    With ``padding_mask`` (the default), id 0 is padding: ``Equal(input_ids, 0)``,
    ``Unsqueeze``-d to ``(N, 1, 1, seq_len)``, drops those keys from every attention
    (``Where(pad, -1e9, scores)``). ``ff`` defaults to ``4 * hidden``, ``seq_len`` to
    ``input_shape[0]`` else 64.
    """
    seq = _seq_len("bert", seq_len, input_shape)
    ff = 4 * hidden if ff is None and isinstance(hidden, int) else ff
    _positive("bert", vocab=vocab, hidden=hidden, heads=heads, layers=layers, ff=ff,
              classes=classes)  # fmt: skip
    assert ff is not None
    _heads("bert", hidden, heads)
    _flags("bert", padding_mask=padding_mask)
    n = _batch(batch)
    g = _Graph("bert", seed, _std("bert", init_std))
    x = g.node("Gather", [g.normal("embed.tokens", (vocab, hidden)), "input_ids"], axis=0)
    x = g.node("Add", [x, g.normal("embed.positions", (seq, hidden))])
    x = g.layer_norm(x, "embed.ln", hidden)
    mask = None
    if padding_mask:
        pad = g.node("Equal", ["input_ids", g.const(0)])
        mask = ("drop", g.node("Unsqueeze", [pad, g.const([1, 2])]))
    for i in range(layers):
        x = g.block(x, f"layer{i}", hidden, heads, ff, mask, pre_ln=False)
    first = g.node("Gather", [x, g.const(0)], axis=1)
    pooled = g.node("Tanh", [_gemm(g, first, "pooler", hidden, hidden, he=False)])
    logits = _gemm(g, pooled, "classifier", hidden, classes, he=False)
    return g.model([_ids(n, seq)], logits, [n, classes], {f"{INPUT_HIGH_KEY}input_ids": str(vocab)})


def vit(
    *,
    image_size: int | None = None,
    patch: int = 4,
    channels: int | None = None,
    hidden: int = 64,
    heads: int = 4,
    layers: int = 2,
    ff: int | None = None,
    classes: int = 10,
    init_std: float = 0.02,
    seed: int = 0,
    input_shape: Sequence[int] | None = None,
    batch: int | None = None,
) -> onnx.ModelProto:
    """A ViT-style image classifier.

    ``input`` float ``(N, channels, image_size, image_size)`` → patch embedding (``Conv``
    of kernel and stride ``patch`` to ``hidden`` channels) → ``Reshape``/``Transpose`` to
    tokens ``(N, patches, hidden)`` → a learned class token put first (``Expand``-ed to
    the batch from ``Shape``/``Slice``, then ``Concat``) + learned position embeddings →
    ``layers`` pre-LN blocks → LayerNorm → the class token (``Gather``) → ``Gemm`` to
    ``classes`` logits ``(N, classes)``.

    ``image_size`` and ``channels`` default to ``input_shape`` (``(C, H, W)`` with
    ``H == W``) else 32 and 3; ``image_size`` must be a multiple of ``patch``.
    """
    if input_shape is not None:
        dims = tuple(input_shape)
        if len(dims) != 3 or dims[1] != dims[2]:
            raise UsageError(f"vit takes input_shape (C, H, H) of square images, not {dims}")
        channels = _agree("vit", "channels", channels, "input_shape", dims[0], 3)
        image_size = _agree("vit", "image_size", image_size, "input_shape", dims[1], 32)
    image_size = 32 if image_size is None else image_size
    channels = 3 if channels is None else channels
    ff = 4 * hidden if ff is None and isinstance(hidden, int) else ff
    _positive("vit", image_size=image_size, patch=patch, channels=channels, hidden=hidden,
              heads=heads, layers=layers, ff=ff, classes=classes)  # fmt: skip
    assert ff is not None
    _heads("vit", hidden, heads)
    if image_size % patch:
        raise UsageError(
            f"vit option image_size ({image_size}) must be a multiple of patch ({patch})"
        )
    n = _batch(batch)
    g = _Graph("vit", seed, _std("vit", init_std))
    tokens = (image_size // patch) ** 2
    w = g.normal("patch.weight", (hidden, channels, patch, patch))
    b = g.param("patch.bias", np.zeros(hidden))
    x = g.node("Conv", ["input", w, b], kernel_shape=[patch, patch], strides=[patch, patch])
    x = g.node("Transpose", [g.node("Reshape", [x, g.const([0, hidden, tokens])])], perm=[0, 2, 1])
    rows = g.node("Slice", [g.node("Shape", [x]), g.const([0]), g.const([1])])
    shape = g.node("Concat", [rows, g.const([1, hidden])], axis=0)
    cls = g.node("Expand", [g.normal("embed.class", (1, 1, hidden)), shape])
    x = g.node("Concat", [cls, x], axis=1)
    x = g.node("Add", [x, g.normal("embed.positions", (tokens + 1, hidden))])
    for i in range(layers):
        x = g.block(x, f"block{i}", hidden, heads, ff, None, pre_ln=True)
    x = g.node("Gather", [g.layer_norm(x, "ln_final", hidden), g.const(0)], axis=1)
    logits = _gemm(g, x, "head", hidden, classes, he=False)
    image = helper.make_tensor_value_info(
        "input", TensorProto.FLOAT, [n, channels, image_size, image_size]
    )
    return g.model([image], logits, [n, classes])


def lstm(
    *,
    vocab: int = 1000,
    seq_len: int | None = None,
    embed: int = 32,
    hidden: int = 64,
    layers: int = 1,
    bidirectional: bool = False,
    classes: int = 2,
    seed: int = 0,
    input_shape: Sequence[int] | None = None,
    batch: int | None = None,
) -> onnx.ModelProto:
    """An LSTM text classifier.

    ``input_ids`` int64 ``(N, seq_len)`` → embedding (``Gather`` of a ``(vocab, embed)``
    table, normal with std 0.1) → ``Transpose`` to time-major ``(seq_len, N, embed)`` →
    ``layers`` ONNX ``LSTM`` operators (``bidirectional`` runs each both ways; a layer
    after the first reads the previous one's ``Y`` with the directions concatenated) →
    the last layer's final hidden state ``Y_h`` as ``(N, directions * hidden)`` →
    ``Gemm`` to ``classes`` logits ``(N, classes)``. ``seq_len`` defaults to
    ``input_shape[0]`` else 32.
    """
    seq = _seq_len("lstm", seq_len, input_shape, 32)
    _positive("lstm", vocab=vocab, embed=embed, hidden=hidden, layers=layers, classes=classes)
    _flags("lstm", bidirectional=bidirectional)
    n = _batch(batch)
    dirs = 2 if bidirectional else 1
    g = _Graph("lstm", seed, 0.1)
    x = g.node("Gather", [g.normal("embed.tokens", (vocab, embed)), "input_ids"], axis=0)
    x = g.node("Transpose", [x], perm=[1, 0, 2])
    bound = 1.0 / np.sqrt(hidden)
    fin = embed
    y_h = x
    for i in range(layers):
        w = g.param(f"lstm{i}.W", g.rng.uniform(-bound, bound, (dirs, 4 * hidden, fin)))
        r = g.param(f"lstm{i}.R", g.rng.uniform(-bound, bound, (dirs, 4 * hidden, hidden)))
        b = g.param(f"lstm{i}.B", g.rng.uniform(-bound, bound, (dirs, 8 * hidden)))
        direction = "bidirectional" if bidirectional else "forward"
        y = g.node("LSTM", [x, w, r, b], outputs=2, hidden_size=hidden, direction=direction)
        y_h = f"{y[:-2]}.1"
        if i + 1 < layers:
            x = g.node("Transpose", [y], perm=[0, 2, 1, 3])
            x = g.node("Reshape", [x, g.const([0, 0, dirs * hidden])])
            fin = dirs * hidden
    last = g.node("Transpose", [y_h], perm=[1, 0, 2])
    last = g.node("Reshape", [last, g.const([0, dirs * hidden])])
    logits = _gemm(g, last, "head", dirs * hidden, classes, he=True)
    return g.model([_ids(n, seq)], logits, [n, classes], {f"{INPUT_HIGH_KEY}input_ids": str(vocab)})


def _gemm(g: _Graph, x: str, base: str, fin: int, fout: int, *, he: bool) -> str:
    """``Gemm`` with a ``(fout, fin)`` weight (``transB=1``) and a zero bias; He normal
    with ``he``, else normal with the graph's ``init_std``."""
    if he:
        w = g.param(f"{base}.weight", g.rng.standard_normal((fout, fin)) * np.sqrt(2.0 / fin))
    else:
        w = g.normal(f"{base}.weight", (fout, fin))
    b = g.param(f"{base}.bias", np.zeros(fout))
    return g.node("Gemm", [x, w, b], transB=1)
