"""The template's operator, executor, metric and dataset do what they say.

The operator is validated against d5's reference backend with d5's own validation API,
and the executor compared with the reference executor: installing the template next to
``d5-plugin-numpy`` (from the d5 repository) is what these tests need.
"""

import numpy as np
import pytest
from d5_plugin_template.executor import TemplateExecutor
from d5_plugin_template.metrics import SlowestStep
from d5_plugin_template.operators import TemplateBackend
from onnx import TensorProto, helper

from d5core.api import (
    MetricBus,
    TensorDescriptor,
    UsageError,
    compare_outputs,
    get_plugin_manager,
    load_dataset,
    validate_operator,
)


def _reference(group):
    return get_plugin_manager().load(group, "numpy")


# -- the operator backend ----------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_relu_matches_the_reference_forward_backward_and_gradcheck(dtype):
    rng = np.random.default_rng(0)
    # away from 0, where Relu has no derivative for central differences to find
    x = (rng.choice([-1, 1], (4, 5)) * rng.uniform(0.1, 2, (4, 5))).astype(dtype)
    described = [TensorDescriptor.of(x)]
    candidate = TemplateBackend().create("Relu", {}, described)
    reference = _reference("d5.operators")().create("Relu", {}, described)
    report = validate_operator(candidate, reference, [x])
    assert report.passed, report.failures()
    assert report.outputs and report.gradients


def test_a_wrong_relu_fails_validation(monkeypatch):
    x = np.array([[-1.0, 2.0]], dtype=np.float32)
    candidate = TemplateBackend().create("Relu", {}, [TensorDescriptor.of(x)])
    monkeypatch.setattr(candidate, "forward", lambda inputs: [np.abs(inputs[0])])
    reference = _reference("d5.operators")().create("Relu", {}, [TensorDescriptor.of(x)])
    assert not validate_operator(candidate, reference, [x], gradcheck=False).passed


@pytest.mark.parametrize(
    ("op_type", "attributes", "inputs", "message"),
    [
        ("Sigmoid", {}, [(2,)], "the template backend has no operator 'Sigmoid'; it has: Relu"),
        ("Relu", {"alpha": 0.1}, [(2,)], "Relu takes no attributes, not 'alpha'"),
        ("Relu", {}, [(2,), (2,)], "Relu takes one input, not 2"),
    ],
)
def test_the_backend_refuses_what_it_cannot_build(op_type, attributes, inputs, message):
    described = [TensorDescriptor(shape) for shape in inputs]
    with pytest.raises(UsageError, match=f"^{message}$"):
        TemplateBackend().create(op_type, attributes, described)


def test_the_backend_refuses_integer_tensors():
    with pytest.raises(UsageError, match="Relu runs on float32 or float64, not int64"):
        TemplateBackend().create("Relu", {}, [TensorDescriptor((2,), "int64")])


# -- the graph executor ------------------------------------------------------------------


def _two_relus(op_types=("Relu", "Relu")):
    nodes = [
        helper.make_node(op_types[0], ["x"], ["h"], name="first"),
        helper.make_node(op_types[1], ["h"], ["y"], name="second"),
    ]
    graph = helper.make_graph(
        nodes,
        "two_nodes",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 3])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_the_executor_agrees_with_the_reference_executor():
    model = _two_relus()
    feeds = {"x": np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)}
    actual = TemplateExecutor(model).inference(feeds)
    expected = _reference("d5.frameworks")(model).inference(feeds)
    (check,) = compare_outputs([actual["y"]], [expected["y"]], names=["y"])
    assert check.passed, check.detail
    assert (actual["y"] >= 0).all() and (actual["y"] == np.maximum(feeds["x"], 0)).all()


def test_the_executor_names_the_node_it_cannot_run():
    with pytest.raises(UsageError, match=r"operator 'Sigmoid' \(node 'second'\)"):
        TemplateExecutor(_two_relus(("Relu", "Sigmoid"))).inference({"x": np.ones((1, 3))})


# -- the metric --------------------------------------------------------------------------


def test_the_metric_reports_the_longest_step_until_detached():
    bus, metric = MetricBus(), SlowestStep()
    metric.attach(bus)
    for ns in (5_000_000, 20_000_000, 1_000_000):
        bus.publish("train.step.end", level=2, duration_ns=ns)
    bus.publish("train.epoch.end", level=2, duration_ns=10**9)  # not a step
    metric.detach()
    bus.publish("train.step.end", level=2, duration_ns=10**9)
    assert metric.safe_result() == {"value": 0.02, "unit": "s", "steps": 3}


def test_the_metric_says_why_it_has_no_value():
    bus, metric = MetricBus(), SlowestStep()
    metric.attach(bus)
    bus.publish("train.step.end", level=2)  # a payload without duration_ns
    result = metric.safe_result()
    assert result["unavailable"] == "no training step finished"
    assert result["problems"] == ["handling 'train.step.end' raised KeyError: 'duration_ns'"]


# -- the dataset -------------------------------------------------------------------------


def test_the_dataset_labels_points_inside_the_circle_through_d5():
    data = load_dataset("template_circle", "train", samples=2000, seed=3)
    assert (len(data), data.input_shape, data.num_classes) == (2000, (2,), 2)
    x, y = data.batch(np.arange(len(data)))
    assert (x.dtype, y.dtype, x.shape) == (np.float32, np.int64, (2000, 2))
    np.testing.assert_array_equal(y, (np.hypot(x[:, 0], x[:, 1]) ** 2 < 2 / np.pi))
    assert 0.45 < y.mean() < 0.55  # the circle covers half the square


def test_the_dataset_splits_are_seeded_and_distinct():
    train = load_dataset("template_circle", "train", samples=8).batch([0, 1, 2])[0]
    again = load_dataset("template_circle", "train", samples=8).batch([0, 1, 2])[0]
    test = load_dataset("template_circle", "test", samples=8).batch([0, 1, 2])[0]
    np.testing.assert_array_equal(train, again)
    assert not np.array_equal(train, test)


def test_the_dataset_refuses_an_unknown_split():
    with pytest.raises(UsageError, match="has no split 'valid'; use train or test"):
        load_dataset("template_circle", "valid")
