"""An executor agrees with d5's numpy reference executor: a test kit for executor plugins.

:class:`ReferenceAgreementTests` runs an executor and the reference (the ``numpy`` entry
of ``d5.frameworks``) on the small networks of :mod:`d5core.testing.networks`, on zoo
networks (gradients in float64, where float32 rounding alone would hide a wrong one) and
on the onnx package's light models, and compares outputs, gradients and BatchNormalization
running statistics. A plugin author subclasses it in a test module and names the
executor class::

    from d5core.testing.reference_agreement import ReferenceAgreementTests
    from my_plugin.executor import MyExecutor

    class TestMyExecutorAgreesWithTheReference(ReferenceAgreementTests):
        executor = MyExecutor

:func:`compare_with_reference` is the comparison itself, for a plugin's own networks.
Import this module in tests only: it imports onnx and pytest.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np
import onnx
import pytest

from d5core.levels.networks import GraphExecutor
from d5core.lv1 import zoo
from d5core.onnx.network import Network
from d5core.testing.networks import (
    assert_matches_light_output,
    cnn,
    feeds_for,
    float64_model,
    legacy,
    mlp,
)
from d5core.testing.onnx_semantics import reference_executor

__all__ = [
    "LIGHT_MODELS",
    "SMALL_NETWORKS",
    "ZOO_NETWORKS",
    "ReferenceAgreementTests",
    "compare_with_reference",
    "zoo_feeds",
]

#: The onnx package's light models (opset 9, weights made in the graph by ConstantOfShape).
LIGHT_MODELS = [
    "resnet50",
    "squeezenet",
    "bvlc_alexnet",
    "densenet121",
    "inception_v1",
    "inception_v2",
    "shufflenet",
    "vgg19",
    "zfnet512",
]
#: Zoo networks compared at batch 2.
ZOO_NETWORKS = ["mlp", "lenet5", "resnet20", "vgg"]
#: The small networks of :mod:`d5core.testing.networks`, by name.
SMALL_NETWORKS: dict[str, Callable[[], onnx.ModelProto]] = {
    "mlp": mlp,
    "cnn": cnn,
    "legacy": legacy,
}


def compare_with_reference(
    executor: type[GraphExecutor],
    net: Network | onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    loss: str | None,
    *,
    rel: float = 2e-3,
    exact_dtypes: bool = True,
) -> None:
    """Assert that ``executor`` computes what the reference does on ``net``.

    Outputs must agree to ``rtol=1e-4, atol=1e-5``. With a ``loss``, so must the loss, and
    every gradient to ``rel`` of its L2 norm, and the running statistics the training pass
    leaves behind. ``exact_dtypes`` also asks for each output's dtype and each gradient's
    shape and dtype to be the reference's, and for the same running statistics.
    """
    ref, ex = reference_executor(net), executor(net)
    want, got = ref.inference(feeds), ex.inference(feeds)
    for name, w in want.items():
        if exact_dtypes:
            assert got[name].dtype == w.dtype, name
        np.testing.assert_allclose(got[name], w, rtol=1e-4, atol=1e-5, err_msg=name)
    if loss is None:
        return
    (w_out, w_grads), (g_out, g_grads) = (
        ref.inference_and_backprop(feeds, loss),
        ex.inference_and_backprop(feeds, loss),
    )
    np.testing.assert_allclose(g_out[loss], w_out[loss], rtol=1e-4, atol=1e-5)
    assert set(g_grads) == set(w_grads)
    for name, w in w_grads.items():
        if exact_dtypes:
            assert g_grads[name].shape == w.shape and g_grads[name].dtype == w.dtype, name
        err = float(np.linalg.norm(g_grads[name] - w))
        assert err <= rel * float(np.linalg.norm(w)) + 1e-6, (name, err)
    ref_stats: dict[str, np.ndarray] = getattr(ref, "running_stats", {})
    ex_stats: dict[str, Any] = getattr(ex, "running_stats", {})
    if exact_dtypes:
        assert set(ex_stats) == set(ref_stats)
    for name, value in ref_stats.items():
        np.testing.assert_allclose(_host(ex_stats[name]), value, rtol=1e-4, atol=1e-5)


def _host(value: Any) -> np.ndarray:
    """A running statistic as numpy: through its ``numpy()`` where it has one (torch,
    TensorFlow, MXNet's ``StatArray``), else ``np.asarray`` (numpy, JAX)."""
    to_numpy = getattr(value, "numpy", None)
    return np.asarray(to_numpy() if callable(to_numpy) else value)


def zoo_feeds(net: Network, seed: int = 0) -> dict[str, np.ndarray]:
    """Random feeds for a zoo network: labels in ``[0, 10)``, unknown dimensions 2."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for v in net.inputs:
        shape = [d if isinstance(d, int) and d > 0 else 2 for d in v.shape]
        feeds[v.name] = (
            rng.integers(0, 10, shape).astype(np.int64)
            if v.name == "labels"
            else rng.standard_normal(shape).astype(np.float32)
        )
    return feeds


class ReferenceAgreementTests:
    """Outputs and gradients agree with the numpy reference executor; subclass it with
    ``executor`` set (see the module docstring)."""

    #: The executor class under test.
    executor: ClassVar[type[GraphExecutor]]
    #: Whether dtypes, gradient shapes and the set of running statistics must match too
    #: (see :func:`compare_with_reference`).
    exact_dtypes: ClassVar[bool] = True
    #: When set, the longest one light model's inference may take, in seconds.
    light_model_seconds: ClassVar[float | None] = None

    @pytest.mark.parametrize("build", list(SMALL_NETWORKS), ids=list(SMALL_NETWORKS))
    def test_matches_numpy_executor(self, build: str) -> None:
        model = SMALL_NETWORKS[build]()
        loss = "loss" if any(o.name == "loss" for o in model.graph.output) else None
        compare_with_reference(
            self.executor, model, feeds_for(model), loss, exact_dtypes=self.exact_dtypes
        )

    @pytest.mark.parametrize("name", ZOO_NETWORKS)
    def test_zoo_matches_numpy_executor(self, name: str) -> None:
        net = Network(zoo.ZOO[name](batch=2))
        loss = net.add_loss(net.outputs[0].name)
        feeds = zoo_feeds(net)
        compare_with_reference(self.executor, net, feeds, None, exact_dtypes=self.exact_dtypes)
        # gradients in float64: through deep batch-2 BatchNormalization in training mode,
        # float32 rounding alone moves resnet20's first gradients by ~1% (relative L2)
        net64 = Network(float64_model(net.model), check=False)
        feeds64 = {
            k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in feeds.items()
        }
        compare_with_reference(
            self.executor, net64, feeds64, loss, rel=1e-9, exact_dtypes=self.exact_dtypes
        )

    @pytest.mark.parametrize("name", LIGHT_MODELS)
    def test_light_models_match_expected_output(self, name: str) -> None:
        def run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
            start = time.perf_counter()
            out = self.executor(model).inference(feeds)
            if self.light_model_seconds is not None:
                assert time.perf_counter() - start < self.light_model_seconds
            (got,) = out.values()
            return np.asarray(got)

        assert_matches_light_output(run, name)
