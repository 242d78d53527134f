"""d5's graph executors against the same networks written directly in each framework.

A graph executor translates an ONNX graph into framework calls. Whether that costs
anything is measured here: each network runs two ways in the same process, on the same
inputs (converted beforehand on both sides) and with the same weights (copied from the
d5 network), and the two are timed with the same ``perf_counter`` loop:

- **torch**: the ``torch`` executor's prepared callables (``prepare_inference``,
  ``prepare_train_step``) against ``torch.nn`` modules (``nn.Conv2d``, ``nn.Linear``,
  ``nn.BatchNorm2d``; inference under ``torch.no_grad()`` in ``eval()`` mode, the train
  step in ``train()`` mode with ``F.cross_entropy`` and ``torch.autograd.grad``);
- **tensorflow**: the ``tensorflow`` executor's prepared callables against a Keras 3
  functional model in NHWC, called in a ``tf.function`` (inference with
  ``training=False``; the train step with ``training=True`` under a ``GradientTape``,
  ``tf.nn.sparse_softmax_cross_entropy_with_logits`` and ``tape.gradient``). The
  ``tf.function`` is called two ways, each its own comparison: through its concrete
  function (``get_concrete_function``, as d5's prepared callables call theirs; path
  ``graph``), and as users usually call it, ``fn(x)``, which matches the arguments to a
  traced signature on every call (path ``graph, tf.function call``). The
  ``tensorflow-xla`` executor (XLA) is compared with the same ``tf.function`` compiled
  with ``jit_compile=True`` (paths ``xla`` and ``xla, tf.function call``); a case XLA
  refuses is listed as not compared;
- **jax**: the ``jax`` executor's prepared callables against the network written as a
  pure function of a parameter dict with ``jax.numpy`` and ``jax.lax``
  (``lax.conv_general_dilated``, ``lax.reduce_window``, BatchNormalization by hand), in
  one ``jax.jit`` with the parameters as arguments (inference with the running
  statistics; the train step with the batch's, ``jax.value_and_grad`` of the mean
  cross-entropy, and the updated running statistics returned). The hand network runs in
  two layouts, each its own comparison: the data's ``NCHW`` with ONNX's kernels (path
  ``jit, NCHW``) and Flax's ``NHWC`` with ``HWIO`` kernels (path ``jit, NHWC``). JAX
  dispatches asynchronously: every call of either side ends in ``jax.block_until_ready``.

Networks: the zoo's ``lenet5`` (1x28x28) and ``resnet20`` (3x32x32, BatchNormalization,
projection shortcuts), 10 classes, seed 0. The zoo initialises BatchNormalization as the
identity and every bias at zero, which would hide a parameter copied to the wrong place;
those parameters are first redrawn from a seeded generator (on the d5 network, so both
sides get them). Modes: ``inference`` (BatchNormalization with its running statistics)
and ``train`` (one step: forward in training mode, the mean cross-entropy loss of
``with_loss``, the gradients of every parameter; no optimizer update on either side).

Before anything is timed, each case checks that both sides compute the same thing: the
logits (inference) or the loss (train) must agree to ``1e-5 + 1e-4 * max|hand|``, and
the gradient of every weight to 3% relative L2 (float32 gradients through
BatchNormalization are ill-conditioned; see ``_compare``). The largest absolute
difference over the compared tensors, and the largest relative L2 difference of the
gradients, are reported per case.

Design (as ``train_overhead.py``): ``--processes`` fresh worker processes, one per
framework and process index, one after the other. In each worker every side of a case is
called once (tracing, compilation), its call time estimated, and a number of calls per
block fixed for the case so that a block of the fastest side lasts about ``--block-s``;
one block of each side is then run and discarded (warm-up). Then ``--rounds`` rounds,
each running one block of every side in an order shuffled per round (garbage collection
off inside blocks); a block's value is the median of its per-call times. A round gives
the ratio d5 / hand and the difference per call of its two blocks. A worker reports the
median over its rounds; the summary gives the median over processes of those medians,
with the nonparametric CI of that median across processes (``median_ci``; with 5
processes it is [min, max], which covers the median with probability 94%). With one
process the CI is over its rounds instead (the between-process variance is then unknown).

Every worker first applies d5's allocator policy (``--allocator``, default ``steady``,
as ``d5`` itself runs; see :mod:`d5core.allocator`), so both sides of a case
allocate under it. Under glibc's own policy (``--allocator system``) how many pages a
call faults in depends on the order in which it frees its tensors, which is measured
then as well.

Targets: ratio <= 1.05 (moonshot <= 1.02).

    .venv/bin/python benchmarks/executor_fairness.py [--processes 5] [--rounds 15]
        [--frameworks torch,tensorflow,jax] [--nets lenet5,resnet20] [--batches 1,32]
        [--modes inference,train] [--block-s 0.1] [--allocator steady|system] [--json]
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from _machine import allocator, load, machine

from d5core.errors import UsageError
from d5core.lv1 import zoo
from d5core.lv1.runner import executor_by_name, make_feeds, with_loss
from d5core.measure.stats import median_ci, median_ci_coverage
from d5core.onnx.network import Network
from d5core.plugins import get_plugin_manager

FRAMEWORKS = ("torch", "tensorflow", "jax")
#: Network name to its input shape (channels first, as the zoo builds it).
NETS: dict[str, tuple[int, int, int]] = {"lenet5": (1, 28, 28), "resnet20": (3, 32, 32)}
MODES = ("inference", "train")
CLASSES = 10
#: Agreement of outputs and losses: ``OUT_ATOL + OUT_RTOL * max|hand|`` (see ``_compare``).
OUT_ATOL, OUT_RTOL = 1e-5, 1e-4
#: Agreement of gradients: relative L2 difference (see ``_compare``).
GRAD_RTOL = 3e-2
TARGET, MOONSHOT = 1.05, 1.02
#: Cases a worker could not compare, with the reason (XLA refusals).
SKIPPED: list[str] = []

Fn = Callable[[], object]
#: What a side computes, for the agreement check: tensor name to value (d5's layout).
Check = Callable[[], dict[str, np.ndarray]]


# -- the networks ---------------------------------------------------------------------


def d5_network(net: str) -> Network:
    """The zoo network with its BatchNormalization and bias parameters redrawn (seeded)."""
    network = zoo.build(net, input_shape=NETS[net], classes=CLASSES, seed=0)
    rng = np.random.default_rng(1)
    for name, value in network.parameters.items():
        kind = name.rsplit(".", 1)[-1]
        if kind in ("bias", "mean"):
            network.set_parameter(name, 0.1 * rng.standard_normal(value.shape))
        elif kind == "scale":
            network.set_parameter(name, 1.0 + 0.1 * rng.standard_normal(value.shape))
        elif kind == "var":
            network.set_parameter(name, rng.uniform(0.5, 1.5, value.shape))
    return network


class Layers:
    """Hand-built layers named as the zoo names their parameters: ``conv{k}``,
    ``batchnormalization{k}`` and ``gemm{k}``, counted in the order of creation (the
    builders below create them in the zoo's order)."""

    def __init__(self) -> None:
        self.count: dict[str, int] = {}
        self.by_name: dict[str, tuple[str, Any]] = {}

    def add(self, kind: str, layer: Any) -> Any:
        k = self.count.get(kind, 0)
        self.count[kind] = k + 1
        self.by_name[f"{kind}{k}"] = (kind, layer)
        return layer


@dataclass
class Binding:
    """One d5 parameter and where it lives on the hand side."""

    name: str  # the d5 (ONNX initializer) name
    target: Any  # the framework's parameter, buffer or variable
    to_hand: Callable[[np.ndarray], np.ndarray] = lambda a: a
    to_d5: Callable[[np.ndarray], np.ndarray] = lambda a: a
    trainable: bool = True


def norm_bindings(name: str, layer: Any, attributes: Sequence[str]) -> list[Binding]:
    """The four bindings of BatchNormalization ``name``: ``attributes`` names the hand
    layer's scale, shift, mean and variance (``weight``, ``bias``, ``running_mean``,
    ``running_var`` in torch)."""
    scale, shift, mean, var = (getattr(layer, a) for a in attributes)
    return [
        Binding(f"{name}.scale", scale),
        Binding(f"{name}.bias", shift),
        Binding(f"{name}.mean", mean, trainable=False),
        Binding(f"{name}.var", var, trainable=False),
    ]


def plain_bindings(layers: Layers, norm: Sequence[str]) -> list[Binding]:
    """The bindings of hand layers that keep ONNX's layouts (torch, Gluon): a
    convolution's or dense layer's ``weight`` and ``bias`` as they are, and each
    BatchNormalization's through :func:`norm_bindings` with the attribute names
    ``norm``."""
    bindings: list[Binding] = []
    for name, (kind, layer) in layers.by_name.items():
        if kind in ("conv", "gemm"):
            bindings.append(Binding(f"{name}.weight", layer.weight))
            if layer.bias is not None:
                bindings.append(Binding(f"{name}.bias", layer.bias))
        else:
            bindings += norm_bindings(name, layer, norm)
    return bindings


def _lenet_flat(shape: tuple[int, int, int]) -> tuple[int, int, int]:
    """Channels, height and width of lenet5's last pooled map (what gemm0 reads)."""
    _, h, w = shape
    return 16, (h // 2 - 4) // 2, (w // 2 - 4) // 2


def _hwio(a: np.ndarray) -> np.ndarray:
    """A convolution kernel from ONNX's ``(out, in, kh, kw)`` to ``(kh, kw, in, out)``."""
    return a.transpose(2, 3, 1, 0)


def _oihw(a: np.ndarray) -> np.ndarray:
    """A ``(kh, kw, in, out)`` convolution kernel (or its gradient) back to ONNX's layout."""
    return a.transpose(3, 2, 0, 1)


def _hwc_rows(
    net: str,
) -> tuple[Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray]]:
    """For lenet5's gemm0, which reads the flattened last pooled map: ONNX's ``(out, C*H*W)``
    weight to a channels-last ``(H*W*C, out)`` kernel, and back. ONNX flattens ``(C, H,
    W)``, a channels-last network ``(H, W, C)``: the kernel's input rows are reordered."""
    fc, fh, fw = _lenet_flat(NETS[net])

    def to_kernel(a: np.ndarray) -> np.ndarray:
        return a.reshape(-1, fc, fh, fw).transpose(2, 3, 1, 0).reshape(fh * fw * fc, -1)

    def to_weight(a: np.ndarray) -> np.ndarray:
        return a.reshape(fh, fw, fc, -1).transpose(3, 2, 0, 1).reshape(-1, fc * fh * fw)

    return to_kernel, to_weight


def _compare(
    d5: Mapping[str, np.ndarray], hand: Mapping[str, np.ndarray], gradients: frozenset[str]
) -> dict[str, dict[str, Any]]:
    """Per tensor, the largest absolute difference and the relative L2 difference
    ``|d5 - hand| / |hand|``; raises when a tensor is out of tolerance.

    Outputs and losses must agree to ``OUT_ATOL + OUT_RTOL * max|hand|``: this is the
    tight check (a weight in the wrong place, another padding or flattening order moves
    the logits and the loss far beyond it). Gradients of a float32 training step through
    BatchNormalization are ill-conditioned: on resnet20 at batch 32 two correct float32
    computations each lie up to about 0.6% (relative L2) from the float64 gradients, and
    up to 1.2% from each other (the XLA-compiled ones); they must agree to ``GRAD_RTOL``.
    """
    diffs: dict[str, dict[str, Any]] = {}
    for name, h in hand.items():
        d = np.asarray(d5[name], dtype=np.float64)
        h = np.asarray(h, dtype=np.float64)
        if d.shape != h.shape:
            raise SystemExit(f"{name}: d5 gives shape {d.shape}, the hand side {h.shape}")
        diff = float(np.max(np.abs(d - h))) if d.size else 0.0
        norm = float(np.linalg.norm(h))
        rel = float(np.linalg.norm(d - h)) / norm if norm else diff
        largest = float(np.max(np.abs(h), initial=0.0))
        ok = rel <= GRAD_RTOL if name in gradients else diff <= OUT_ATOL + OUT_RTOL * largest
        if not ok:
            raise SystemExit(
                f"{name}: d5 and the hand-written network disagree (max abs difference "
                f"{diff:.3g}, relative L2 {rel:.3g}, largest value {largest:.3g}): not the "
                "same computation, nothing is timed"
            )
        diffs[name] = {"abs": diff, "rel": rel, "gradient": name in gradients}
    return diffs


# -- torch ----------------------------------------------------------------------------


def torch_model(net: str) -> tuple[Any, list[Binding]]:
    """The network as ``torch.nn`` modules, and where each d5 parameter goes."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    layers = Layers()
    c, h, w = NETS[net]

    class LeNet5(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            fc, fh, fw = _lenet_flat((c, h, w))
            self.conv1 = layers.add("conv", nn.Conv2d(c, 6, 5, padding=2))
            self.conv2 = layers.add("conv", nn.Conv2d(6, 16, 5))
            self.fc1 = layers.add("gemm", nn.Linear(fc * fh * fw, 120))
            self.fc2 = layers.add("gemm", nn.Linear(120, 84))
            self.fc3 = layers.add("gemm", nn.Linear(84, CLASSES))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = F.max_pool2d(F.relu(self.conv1(x)), 2)
            x = F.max_pool2d(F.relu(self.conv2(x)), 2)
            x = torch.flatten(x, 1)
            x = F.relu(self.fc1(x))
            x = F.relu(self.fc2(x))
            return self.fc3(x)

    def bn(channels: int) -> nn.BatchNorm2d:
        # ONNX momentum 0.9 weighs the old value; torch's 0.1 weighs the new one.
        return layers.add("batchnormalization", nn.BatchNorm2d(channels, eps=1e-5, momentum=0.1))

    class BasicBlock(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = layers.add("conv", nn.Conv2d(cin, cout, 3, stride, 1, bias=False))
            self.bn1 = bn(cout)
            self.conv2 = layers.add("conv", nn.Conv2d(cout, cout, 3, 1, 1, bias=False))
            self.bn2 = bn(cout)
            self.shortcut: nn.Module = nn.Identity()
            if stride != 1 or cin != cout:
                self.shortcut = nn.Sequential(
                    layers.add("conv", nn.Conv2d(cin, cout, 1, stride, bias=False)), bn(cout)
                )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = F.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return F.relu(out + self.shortcut(x))

    class ResNet20(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = layers.add("conv", nn.Conv2d(c, 16, 3, 1, 1, bias=False))
            self.bn1 = bn(16)
            blocks, cin = [], 16
            for stage, cout in enumerate((16, 32, 64)):
                for block in range(3):
                    stride = 2 if stage > 0 and block == 0 else 1
                    blocks.append(BasicBlock(cin, cout, stride))
                    cin = cout
            self.blocks = nn.Sequential(*blocks)
            self.fc = layers.add("gemm", nn.Linear(64, CLASSES))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = F.relu(self.bn1(self.conv1(x)))
            x = self.blocks(x)
            x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
            return self.fc(x)

    model = {"lenet5": LeNet5, "resnet20": ResNet20}[net]()
    return model, plain_bindings(layers, ("weight", "bias", "running_mean", "running_var"))


def torch_sides(net: str, batch: int, mode: str) -> list[Comparison]:
    """The torch executor against ``torch.nn`` on one case."""
    import torch
    import torch.nn.functional as F

    network, loss, feeds = _case(net, batch, mode)
    executor: Any = executor_by_name("torch", network)
    model, bindings = torch_model(net)
    params = network.parameters
    with torch.no_grad():
        for b in bindings:
            b.target.copy_(torch.from_numpy(np.ascontiguousarray(b.to_hand(params[b.name]))))
    x = torch.from_numpy(feeds["input"])
    trained = [b for b in bindings if b.trainable]
    leaves = [b.target for b in trained]

    if mode == "inference":
        model.eval()

        def hand() -> torch.Tensor:
            with torch.no_grad():
                return model(x)

        def hand_check() -> dict[str, np.ndarray]:
            return {"output": hand().numpy()}

        d5 = executor.prepare_inference(feeds)

        def d5_check() -> dict[str, np.ndarray]:
            return executor.inference(feeds)
    else:
        model.train()
        y = torch.from_numpy(feeds["labels"])

        def step() -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
            value = F.cross_entropy(model(x), y)
            return value, torch.autograd.grad(value, leaves)

        hand = step

        def hand_check() -> dict[str, np.ndarray]:
            value, grads = step()
            out = {b.name: g.numpy() for b, g in zip(trained, grads, strict=True)}
            return {loss: value.detach().numpy(), **out}

        d5 = executor.prepare_train_step(feeds, loss)

        def d5_check() -> dict[str, np.ndarray]:
            outputs, grads = executor.inference_and_backprop(feeds, loss)
            return {**outputs, **grads}

    diffs = _compare(d5_check(), hand_check(), frozenset(b.name for b in trained))
    return [Comparison("eager", Side("d5 torch", d5), Side("torch.nn", hand), diffs)]


# -- tensorflow -------------------------------------------------------------------------


def keras_model(net: str) -> tuple[Any, list[Binding]]:
    """The network as a Keras 3 functional model in NHWC, and where each d5 parameter
    goes (convolution kernels as (kh, kw, in, out), dense kernels as (in, out))."""
    from d5_plugin_tensorflow._tf import tensorflow

    tensorflow()  # thread pools and determinism first, as d5 sets them
    os.environ["KERAS_BACKEND"] = "tensorflow"
    import keras
    from keras import layers as kl

    layers = Layers()
    c, h, w = NETS[net]
    inputs = keras.Input(shape=(h, w, c))

    def conv(x: Any, filters: int, k: int, stride: int = 1, pad: int = 0, bias: bool = True) -> Any:
        # ONNX pads symmetrically; "same" does so too for stride 1 and an odd kernel, but
        # pads only the end for stride 2 on an even size: pad explicitly there.
        padding = "same" if stride == 1 and pad == k // 2 and pad > 0 else "valid"
        if padding == "valid" and pad:
            x = kl.ZeroPadding2D(pad)(x)
        layer = kl.Conv2D(filters, k, strides=stride, padding=padding, use_bias=bias)
        return layers.add("conv", layer)(x)

    def bn(x: Any) -> Any:
        # Keras' momentum weighs the old value, as ONNX's does.
        layer = kl.BatchNormalization(momentum=0.9, epsilon=1e-5)
        return layers.add("batchnormalization", layer)(x)

    def dense(x: Any, units: int) -> Any:
        return layers.add("gemm", kl.Dense(units))(x)

    if net == "lenet5":
        y = kl.MaxPooling2D(2)(kl.ReLU()(conv(inputs, 6, 5, pad=2)))
        y = kl.MaxPooling2D(2)(kl.ReLU()(conv(y, 16, 5)))
        y = kl.Flatten()(y)
        y = kl.ReLU()(dense(y, 120))
        y = kl.ReLU()(dense(y, 84))
        y = dense(y, CLASSES)
    else:
        y = kl.ReLU()(bn(conv(inputs, 16, 3, pad=1, bias=False)))
        cin = 16
        for stage, cout in enumerate((16, 32, 64)):
            for block in range(3):
                stride = 2 if stage > 0 and block == 0 else 1
                z = kl.ReLU()(bn(conv(y, cout, 3, stride, 1, bias=False)))
                z = bn(conv(z, cout, 3, 1, 1, bias=False))
                shortcut = y
                if stride != 1 or cin != cout:
                    shortcut = bn(conv(y, cout, 1, stride, bias=False))
                y = kl.ReLU()(kl.Add()([z, shortcut]))
                cin = cout
        y = dense(kl.GlobalAveragePooling2D()(y), CLASSES)
    model = keras.Model(inputs, y, name=f"keras_{net}")
    flat_kernel, flat_weight = _hwc_rows(net)
    conv_kernel, conv_weight = _hwio, _oihw
    bindings: list[Binding] = []
    for name, (kind, layer) in layers.by_name.items():
        if kind == "conv":
            bindings.append(Binding(f"{name}.weight", layer.kernel, conv_kernel, conv_weight))
            if layer.bias is not None:
                bindings.append(Binding(f"{name}.bias", layer.bias))
        elif kind == "gemm":
            first_lenet = net == "lenet5" and name == "gemm0"
            bindings.append(
                Binding(f"{name}.weight", layer.kernel,
                        flat_kernel if first_lenet else np.transpose,
                        flat_weight if first_lenet else np.transpose)
            )  # fmt: skip
            bindings.append(Binding(f"{name}.bias", layer.bias))
        else:
            bindings += norm_bindings(
                name, layer, ("gamma", "beta", "moving_mean", "moving_variance")
            )
    return model, bindings


def tensorflow_sides(net: str, batch: int, mode: str) -> list[Comparison]:
    """The tensorflow executor (and its XLA mode, when it has one) against Keras.

    A case XLA refuses (TensorFlow has no deterministic XLA kernel for some gradients,
    and d5 runs TensorFlow with op determinism on) is left out of the XLA comparison
    and listed in :data:`SKIPPED`.
    """
    from d5_plugin_tensorflow._tf import tensorflow

    tf = tensorflow()
    network, loss, feeds = _case(net, batch, mode)
    comparisons = []
    for xla in (False, True):
        executor = tf_executor(network, xla)
        if executor is None:
            continue
        try:
            comparisons += keras_comparisons(executor, net, mode, loss, feeds, xla)
        except (UsageError, tf.errors.OpError) as exc:
            if not xla:
                raise
            first = str(getattr(exc, "message", exc)).strip().splitlines()[0]
            SKIPPED.append(f"tensorflow {net} batch {batch} {mode}, xla: {first}")
    return comparisons


def keras_comparisons(
    executor: Any, net: str, mode: str, loss: str, feeds: dict[str, np.ndarray], xla: bool
) -> list[Comparison]:
    """``executor`` against the Keras model in a ``tf.function`` (``jit_compile=xla``),
    called two ways: as a user calls it (``fn(x)``: TensorFlow matches the arguments to
    a traced signature on every call), and through its traced concrete function
    (``fn.get_concrete_function(x)``, what d5's prepared callables call: no matching)."""
    from d5_plugin_tensorflow._tf import tensorflow

    tf = tensorflow()
    model, bindings = keras_model(net)
    params = executor.network.parameters
    for b in bindings:
        b.target.assign(np.ascontiguousarray(b.to_hand(params[b.name])))
    args = [tf.constant(np.ascontiguousarray(feeds["input"].transpose(0, 2, 3, 1)))]
    trained = [b for b in bindings if b.trainable]
    variables = [b.target for b in trained]

    if mode == "inference":

        @tf.function(jit_compile=xla)
        def function(x: Any) -> Any:
            return model(x, training=False)

        def hand_check() -> dict[str, np.ndarray]:
            return {"output": function(*args).numpy()}

        d5 = executor.prepare_inference(feeds)

        def d5_check() -> dict[str, np.ndarray]:
            return dict(executor.inference(feeds))
    else:
        args.append(tf.constant(feeds["labels"]))

        @tf.function(jit_compile=xla)
        def function(x: Any, y: Any) -> Any:
            with tf.GradientTape() as tape:
                logits = model(x, training=True)
                value = tf.reduce_mean(
                    tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
                )
            return value, tape.gradient(value, variables)

        def hand_check() -> dict[str, np.ndarray]:
            value, grads = function(*args)
            out = {b.name: b.to_d5(g.numpy()) for b, g in zip(trained, grads, strict=True)}
            return {loss: value.numpy(), **out}

        d5 = executor.prepare_train_step(feeds, loss)

        def d5_check() -> dict[str, np.ndarray]:
            outputs, grads = executor.inference_and_backprop(feeds, loss)
            return {**outputs, **grads}

    diffs = _compare(d5_check(), hand_check(), frozenset(b.name for b in trained))
    concrete = function.get_concrete_function(*args)
    path = "xla" if xla else "graph"
    jit = ", jit_compile" if xla else ""
    d5_side = Side(f"d5 tensorflow{' (xla)' if xla else ''}", d5)
    return [
        Comparison(path, d5_side, Side(f"Keras, concrete tf.function{jit}",
                                       lambda: concrete(*args)), diffs),
        Comparison(f"{path}, tf.function call", d5_side,
                   Side(f"Keras, tf.function call{jit}", lambda: function(*args)), diffs),
    ]  # fmt: skip


def tf_executor(network: Network, xla: bool) -> Any:
    """The tensorflow executor on ``network``, or its XLA mode: the ``tensorflow-xla``
    executor where one is registered, else ``jit_compile=True`` (``None`` when the
    executor has no XLA mode)."""
    if not xla:
        return executor_by_name("tensorflow", network)
    if "tensorflow-xla" in get_plugin_manager().names("d5.frameworks"):
        return executor_by_name("tensorflow-xla", network)
    from d5_plugin_tensorflow import executor as module

    try:
        return module.TensorFlowExecutor(network, jit_compile=True)
    except TypeError:  # no XLA mode
        return None


# -- jax ------------------------------------------------------------------------------

#: The hand-written JAX network's layouts, each its own comparison: the data's own
#: (``NCHW``, ONNX's ``OIHW`` kernels) and Flax's (``NHWC``, ``HWIO`` kernels).
JAX_LAYOUTS = ("NCHW", "NHWC")


def _jax() -> Any:
    """JAX as d5 imports it (its settings applied first), so both sides run under them."""
    from d5_plugin_jax import _jax as configured

    return configured.jax()


def jax_model(
    net: str, layout: str, names: Sequence[str]
) -> tuple[Callable[..., Any], list[Binding]]:
    """The network as a pure ``jax.numpy``/``jax.lax`` function of a parameter dict, and
    where each d5 parameter (``names``, the network's) goes: the dict's key is its name.

    ``forward(params, x, train)`` returns the logits and, in training mode, the updated
    running statistics of every BatchNormalization (which normalises with the batch's
    statistics then, as ONNX's training mode does). In ``NCHW`` every parameter keeps
    ONNX's layout (dense layers compute ``x @ w.T``); in ``NHWC`` kernels are ``HWIO``,
    dense kernels ``(in, out)`` and lenet5's gemm0 rows follow the channels-last flatten.
    The forward takes the parameters of each kind in the zoo's order (``conv{k}``,
    ``batchnormalization{k}``, ``gemm{k}``), counted afresh on every trace.
    """
    jax = _jax()
    jnp, lax, relu = jax.numpy, jax.lax, jax.nn.relu
    last = layout == "NHWC"
    spatial = (1, 2) if last else (2, 3)
    numbers = ("NHWC", "HWIO", "NHWC") if last else ("NCHW", "OIHW", "NCHW")
    window = (1, 2, 2, 1) if last else (1, 1, 2, 2)

    def per_channel(v: Any) -> Any:
        return v if last else v[:, None, None]

    def forward(params: dict[str, Any], x: Any, train: bool) -> tuple[Any, dict[str, Any]]:
        count: dict[str, int] = {}
        stats: dict[str, Any] = {}

        def take(kind: str) -> str:
            k = count.get(kind, 0)
            count[kind] = k + 1
            return f"{kind}{k}"

        def conv(x: Any, stride: int = 1, pad: int = 0) -> Any:
            n = take("conv")
            y = lax.conv_general_dilated(x, params[f"{n}.weight"], (stride, stride),
                                         ((pad, pad), (pad, pad)),
                                         dimension_numbers=numbers)  # fmt: skip
            bias = params.get(f"{n}.bias")
            return y if bias is None else y + per_channel(bias)

        def bn(x: Any) -> Any:
            n = take("batchnormalization")
            if train:
                axes = (0, *spatial)
                mean = jnp.mean(x, axis=axes)
                var = jnp.mean(jnp.square(x - per_channel(mean)), axis=axes)
                stats[f"{n}.mean"] = 0.9 * params[f"{n}.mean"] + 0.1 * mean
                stats[f"{n}.var"] = 0.9 * params[f"{n}.var"] + 0.1 * var
            else:
                mean, var = params[f"{n}.mean"], params[f"{n}.var"]
            scale = params[f"{n}.scale"] * lax.rsqrt(var + 1e-5)
            return x * per_channel(scale) + per_channel(params[f"{n}.bias"] - mean * scale)

        def dense(x: Any) -> Any:
            n = take("gemm")
            w = params[f"{n}.weight"]
            return (x @ w if last else x @ w.T) + params[f"{n}.bias"]

        def pool(x: Any) -> Any:
            return lax.reduce_window(x, -jnp.inf, lax.max, window, window, "VALID")

        if net == "lenet5":
            y = pool(relu(conv(x, pad=2)))
            y = pool(relu(conv(y)))
            y = relu(dense(y.reshape(y.shape[0], -1)))
            return dense(relu(dense(y))), stats
        y = relu(bn(conv(x, pad=1)))
        cin = 16
        for stage, cout in enumerate((16, 32, 64)):
            for block in range(3):
                stride = 2 if stage > 0 and block == 0 else 1
                z = relu(bn(conv(y, stride, 1)))
                z = bn(conv(z, 1, 1))
                shortcut = bn(conv(y, stride)) if stride != 1 or cin != cout else y
                y = relu(z + shortcut)
                cin = cout
        return dense(jnp.mean(y, axis=spatial)), stats

    def converters(layer: str, kind: str) -> tuple[Callable[[np.ndarray], np.ndarray], ...]:
        if not last or kind != "weight":
            return (np.asarray, np.asarray)
        if layer.startswith("conv"):
            return (_hwio, _oihw)
        if net == "lenet5" and layer == "gemm0":
            return _hwc_rows(net)
        return (np.transpose, np.transpose)

    bindings = []
    for name in names:
        layer, kind = name.rsplit(".", 1)
        to_hand, to_d5 = converters(layer, kind)
        bindings.append(Binding(name, name, to_hand, to_d5, kind not in ("mean", "var")))
    return forward, bindings


def jax_sides(net: str, batch: int, mode: str, executor_name: str = "jax") -> list[Comparison]:
    """d5's ``jax`` executor against the network written in ``jax.numpy``/``jax.lax``
    and jitted, in each of :data:`JAX_LAYOUTS` (one comparison each). JAX dispatches
    asynchronously: every call of either side waits for its results
    (``jax.block_until_ready``), as d5's timing does through its synchronize hook.
    ``executor_name`` is another executor to hold the hand network against (the tests
    use ``numpy``, the reference)."""
    network, loss, feeds = _case(net, batch, mode)
    executor: Any = executor_by_name(executor_name, network)
    ready = _jax().block_until_ready
    if mode == "inference":
        d5_fn = executor.prepare_inference(feeds)
        d5_values = dict(executor.inference(feeds))
    else:
        d5_fn = executor.prepare_train_step(feeds, loss)
        outputs, grads = executor.inference_and_backprop(feeds, loss)
        d5_values = {**outputs, **grads}
    d5_side = Side(f"d5 {executor_name}", lambda: ready(d5_fn()))
    comparisons = []
    for layout in JAX_LAYOUTS:
        hand, hand_check, gradients = jax_hand(net, layout, mode, loss, feeds, network)
        diffs = _compare(d5_values, hand_check(), gradients)
        label = f"jax.numpy/lax {layout}, jax.jit"
        comparisons.append(Comparison(f"jit, {layout}", d5_side, Side(label, hand), diffs))
    return comparisons


def jax_hand(
    net: str, layout: str, mode: str, loss: str, feeds: Mapping[str, np.ndarray],
    network: Network,
) -> tuple[Fn, Check, frozenset[str]]:  # fmt: skip
    """The hand-written side of one case in ``layout``: the timed callable (one jitted
    call, the parameters passed as arguments, as JAX's users pass them, waited for), what
    it computes in d5's names and layouts, and the names of the gradients among that."""
    jax = _jax()
    jnp = jax.numpy
    params = network.parameters
    forward, bindings = jax_model(net, layout, list(params))
    trained = [b for b in bindings if b.trainable]
    weights = {b.target: jnp.asarray(b.to_hand(params[b.name])) for b in trained}
    stats = {b.target: jnp.asarray(params[b.name]) for b in bindings if not b.trainable}
    image = feeds["input"].transpose(0, 2, 3, 1) if layout == "NHWC" else feeds["input"]
    x = jnp.asarray(np.ascontiguousarray(image))
    if mode == "inference":
        infer = jax.jit(lambda w, s, x: forward({**w, **s}, x, False)[0])

        def hand() -> Any:
            return jax.block_until_ready(infer(weights, stats, x))

        def check() -> dict[str, np.ndarray]:
            return {"output": np.asarray(hand())}

        return hand, check, frozenset()
    y = jnp.asarray(feeds["labels"].astype(np.int32))
    step = jax.jit(_jax_train_step(jax, forward))

    def hand_step() -> Any:
        return jax.block_until_ready(step(weights, stats, x, y))

    def check_step() -> dict[str, np.ndarray]:
        value, grads, _ = hand_step()
        out = {b.name: b.to_d5(np.asarray(grads[b.target])) for b in trained}
        return {loss: np.asarray(value), **out}

    return hand_step, check_step, frozenset(b.name for b in trained)


def _jax_train_step(jax: Any, forward: Callable[..., Any]) -> Callable[..., Any]:
    """One training step of ``forward``: the mean cross-entropy of the logits against
    integer labels, the gradient of every trainable parameter (``jax.value_and_grad``)
    and the updated running statistics; no optimizer update (as d5's train step)."""
    jnp = jax.numpy

    def step(weights: Any, stats: Any, x: Any, y: Any) -> tuple[Any, Any, Any]:
        def loss_of(w: Any) -> tuple[Any, Any]:
            logits, new_stats = forward({**w, **stats}, x, True)
            logp = jax.nn.log_softmax(logits)
            return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1)), new_stats

        (value, new_stats), grads = jax.value_and_grad(loss_of, has_aux=True)(weights)
        return value, grads, new_stats

    return step


# -- measurement ----------------------------------------------------------------------


@dataclass(eq=False)
class Side:
    """One prepared callable and the value of each of its blocks."""

    label: str
    fn: Fn
    blocks: list[float] = field(default_factory=list)


@dataclass
class Comparison:
    """d5's side and a hand-written side computing the same thing (a d5 side may be in
    several comparisons)."""

    path: str
    d5: Side
    hand: Side
    #: Per tensor compared: max abs and relative L2 difference (``_compare``).
    diffs: dict[str, dict[str, Any]]


def _case(net: str, batch: int, mode: str) -> tuple[Network, str, dict[str, np.ndarray]]:
    """The d5 network of a case, its loss output (``""`` for inference) and its feeds."""
    network = d5_network(net)
    if mode == "inference":
        return network, "", make_feeds(network, batch, seed=0)
    trained, loss = with_loss(network)
    return trained, loss, make_feeds(trained, batch, seed=0)


def block(fn: Fn, calls: int) -> float:
    """Median seconds per call over ``calls`` calls of ``fn`` (the same loop for every
    side)."""
    times = [0.0] * calls
    clock = time.perf_counter
    for i in range(calls):
        t0 = clock()
        fn()
        times[i] = clock() - t0
    return statistics.median(times)


def calls_per_block(sides: list[Fn], block_s: float) -> int:
    """Calls per block for a case: about ``block_s`` of its fastest side, 5 to 2000."""
    fastest = min(block(fn, 3) for fn in sides)
    return max(5, min(2000, math.ceil(block_s / max(fastest, 1e-9))))


def measure(comparisons: list[Comparison], rounds: int, block_s: float, rng: random.Random) -> int:
    """Run the rounds of one case (every side once per round, shuffled); fills each
    side's blocks. Returns the calls per block."""
    sides = list({id(s): s for c in comparisons for s in (c.d5, c.hand)}.values())
    for side in sides:  # tracing, compilation, first allocations
        side.fn()
    calls = calls_per_block([s.fn for s in sides], block_s)
    for side in sides:  # warm-up, discarded
        block(side.fn, calls)
    for _ in range(rounds):
        rng.shuffle(sides)
        gc.collect()
        gc.disable()
        try:
            for side in sides:
                side.blocks.append(block(side.fn, calls))
        finally:
            gc.enable()
    return calls


def threads(framework: str) -> str:
    """The thread settings the worker ran with."""
    if framework == "torch":
        import torch

        return f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    if framework == "jax":
        from d5_plugin_jax import _jax

        found = _jax.settings() or {}
        intra = found.get("intra_op_parallelism_threads") or "XLA's default"
        return f"jax {_jax.jax().__version__}, XLA intra-op {intra} threads"
    from d5_plugin_tensorflow import _tf

    tf = _tf.tensorflow()
    found = _tf.settings() or {}
    return (
        f"tensorflow {tf.__version__}, intra-op {found.get('intra_op_parallelism_threads')}"
        f", inter-op {found.get('inter_op_parallelism_threads')} threads"
    )


def worker(args: argparse.Namespace) -> dict[str, Any]:
    """One process's measurement of every case of one framework."""
    policy = allocator()  # before the framework allocates anything
    framework = args.frameworks[0]
    build = {"torch": torch_sides, "tensorflow": tensorflow_sides, "jax": jax_sides}[framework]
    rng = random.Random(args.seed)
    before = os.getloadavg()[0]
    rows = []
    for net in args.nets:
        for batch in args.batches:
            for mode in args.modes:
                comparisons = build(net, batch, mode)
                calls = measure(comparisons, args.rounds, args.block_s, rng)
                for c in comparisons:
                    pairs = list(zip(c.d5.blocks, c.hand.blocks, strict=True))
                    ratios = [d / h for d, h in pairs]
                    rows.append({
                        "framework": framework, "net": net, "batch": batch, "mode": mode,
                        "path": c.path, "d5": c.d5.label, "hand": c.hand.label,
                        "calls_per_block": calls, "rounds": len(pairs),
                        "d5_s": statistics.median(c.d5.blocks),
                        "hand_s": statistics.median(c.hand.blocks),
                        "ratio": statistics.median(ratios),
                        "ratios": ratios,
                        "added_us": statistics.median((d - h) * 1e6 for d, h in pairs),
                        "added_us_rounds": [(d - h) * 1e6 for d, h in pairs],
                        "max_abs_diff": max(d["abs"] for d in c.diffs.values()),
                        "max_grad_rel": max((d["rel"] for d in c.diffs.values()
                                             if d["gradient"]), default=None),
                        "diffs": c.diffs,
                    })  # fmt: skip
                print(f"{framework} {net} batch {batch} {mode}: done", file=sys.stderr)
    return {"pid": os.getpid(), "framework": framework,
            "threads": f"{threads(framework)}, {policy}",
            "load_before": before, "load_after": os.getloadavg()[0], "rows": rows,
            "skipped": SKIPPED}  # fmt: skip


def run_worker(args: argparse.Namespace, framework: str, seed: int) -> dict[str, Any]:
    """Run :func:`worker` for ``framework`` in a fresh interpreter and read its JSON."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--seed", str(seed),
           "--frameworks", framework, "--nets", ",".join(args.nets),
           "--batches", ",".join(map(str, args.batches)), "--modes", ",".join(args.modes),
           "--rounds", str(args.rounds), "--block-s", str(args.block_s)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"{framework} worker failed (exit {done.returncode}): {last}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


# -- summary --------------------------------------------------------------------------

_KEY = ("framework", "net", "batch", "mode", "path")


def summarize(processes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per case: the median over processes of each process's median ratio and µs added
    per call, with their CI across processes (over rounds with one process)."""
    cases: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for p in processes:
        for row in p["rows"]:
            cases.setdefault(tuple(row[k] for k in _KEY), []).append(row)
    out = []
    for rows in cases.values():
        first = rows[0]
        summary = {k: first[k] for k in (*_KEY, "d5", "hand", "calls_per_block")}
        n = len(rows)
        ratios = [r["ratio"] for r in rows]
        added = [r["added_us"] for r in rows]
        if n == 1:
            ci_over, ci_ratios, ci_added = "rounds", first["ratios"], first["added_us_rounds"]
        else:
            ci_over, ci_ratios, ci_added = "processes", ratios, added
        summary.update({
            "processes": n, "rounds": first["rounds"],
            "d5_s": statistics.median(r["d5_s"] for r in rows),
            "hand_s": statistics.median(r["hand_s"] for r in rows),
            "ratio": statistics.median(ratios), "ratios": ratios,
            "ratio_ci": list(median_ci(ci_ratios)), "ci_over": ci_over,
            "ci_coverage": median_ci_coverage(len(ci_ratios)),
            "added_us": statistics.median(added), "added_us_ci": list(median_ci(ci_added)),
            "max_abs_diff": max(r["max_abs_diff"] for r in rows),
            "max_grad_rel": first["max_grad_rel"] if first["max_grad_rel"] is None
            else max(r["max_grad_rel"] for r in rows),
        })  # fmt: skip
        out.append(summary)
    return out


def _table(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| framework | network | batch | mode | path | d5 (µs) | hand (µs) | ratio d5/hand | "
        "95% CI | added/call (µs) | CI (µs) | max abs diff | gradients, rel. L2 |",
        "|---|---|---:|---|---|---:|---:|---:|---|---:|---|---:|---:|",
    ]
    for r in rows:
        lo, hi = r["ratio_ci"]
        alo, ahi = r["added_us_ci"]
        lines.append(
            f"| {r['framework']} | {r['net']} | {r['batch']} | {r['mode']} | {r['path']} | "
            f"{r['d5_s'] * 1e6:.1f} | {r['hand_s'] * 1e6:.1f} | {r['ratio']:.3f} | "
            f"{lo:.3f}–{hi:.3f} ({r['ci_coverage']:.0%}, {r['ci_over']}) | "
            f"{r['added_us']:+.1f} | {alo:+.1f} – {ahi:+.1f} | {r['max_abs_diff']:.1e} | "
            + ("–" if r["max_grad_rel"] is None else f"{r['max_grad_rel']:.1e}")
            + " |"
        )
    return lines


def _names(choices: tuple[str, ...] | list[str]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        names = [t.strip() for t in text.split(",") if t.strip()]
        bad = [n for n in names if n not in choices]
        if bad or not names:
            raise argparse.ArgumentTypeError(
                f"{bad[0] if bad else text!r} is not one of {', '.join(choices)}"
            )
        return names

    return parse


def _batches(text: str) -> list[int]:
    try:
        values = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        values = []
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"batches are positive integers, not {text!r}")
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=5,
                        help="fresh worker processes per framework")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=15, help="rounds per process")
    parser.add_argument("--frameworks", type=_names(FRAMEWORKS), default=list(FRAMEWORKS),
                        help="comma-separated: torch, tensorflow, jax (default all)")  # fmt: skip
    parser.add_argument("--nets", type=_names(tuple(NETS)), default=list(NETS),
                        help="comma-separated: lenet5, resnet20 (default both)")  # fmt: skip
    parser.add_argument("--batches", type=_batches, default=[1, 32],
                        help="comma-separated batch sizes (default 1,32)")  # fmt: skip
    parser.add_argument("--modes", type=_names(MODES), default=list(MODES),
                        help="comma-separated: inference, train (default both)")  # fmt: skip
    parser.add_argument(
        "--block-s", type=float, default=0.1,
        help="seconds of calls per block of the fastest side of a case",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="seed of the orders of the sides")
    parser.add_argument(
        "--allocator", choices=("steady", "system"), default="steady",
        help="the workers' allocator policy (D5_ALLOCATOR; d5's default is steady)",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name in ("processes", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if not args.block_s > 0:
        parser.error(f"--block-s must be positive, got {args.block_s}")
    if args.worker:
        json.dump(worker(args), sys.stdout)
        print()
        return 0
    os.environ["D5_ALLOCATOR"] = args.allocator  # this process's line and the workers'
    start_load = load()
    processes = [
        run_worker(args, framework, args.seed * 1000 + i)
        for i in range(args.processes)
        for framework in args.frameworks
    ]
    summary = summarize(processes)
    settings = {fw: next(p["threads"] for p in processes if p["framework"] == fw)
                for fw in args.frameworks}  # fmt: skip
    info = {"machine": machine(), "load_start": start_load, "load_end": load(),
            "threads": settings, "rounds": args.rounds, "block_s": args.block_s,
            "processes": processes, "summary": summary,
            "skipped": sorted({s for p in processes for s in p["skipped"]})}  # fmt: skip
    if args.json:
        json.dump(info, sys.stdout, indent=2)
        print()
        return 0
    plural = "process" if args.processes == 1 else "processes"
    design = f"{args.processes} {plural} × {args.rounds} rounds per framework"
    loads = f"{info['load_start']} at the start, {info['load_end']} at the end"
    print(f"{info['machine']}; {'; '.join(settings.values())}; {loads}; {design}")
    if args.processes == 1:
        print("one process: the CIs are over rounds; between-process variance unknown")
    print()
    print("\n".join(_table(summary)))
    print()
    for r in summary:
        each = ", ".join(f"{x:.3f}" for x in r["ratios"])
        print(f"{r['framework']} {r['net']} b{r['batch']} {r['mode']} {r['path']}: "
              f"ratio per process {each}")  # fmt: skip
    skipped = sorted({s for p in processes for s in p["skipped"]})
    for line in skipped:
        print(f"not compared: {line}")
    ratios = [r["ratio"] for r in summary]
    over = [r for r in summary if r["ratio"] > TARGET]
    print(
        f"\nratio d5/hand: median {statistics.median(ratios):.3f}, max {max(ratios):.3f}; "
        f"target ≤ {TARGET} {'met' if not over else f'missed by {len(over)} case(s)'}; "
        f"moonshot ≤ {MOONSHOT}: {sum(r <= MOONSHOT for r in ratios)} of {len(ratios)}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
