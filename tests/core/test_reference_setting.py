"""The reference implementation is a setting (``D5_REFERENCE``, default numpy), and
messages that suggest other implementations list the installed ones, not fixed names."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np
import pytest

from d5core.errors import UsageError
from d5core.levels.networks import GraphExecutor
from d5core.lv1 import zoo
from d5core.plugins import PluginManager, reset_plugin_manager
from d5core.plugins.reference import DEFAULT_REFERENCE, REFERENCE_ENV, reference_name
from d5core.testing import FakeSite

HOOKS = 'd5_plugin_api = ">=1.0"\n'

EXECUTORS = """
from d5core.levels.networks import GraphExecutor

class Trains(GraphExecutor):
    name = "fake-trains"
    def inference(self, feeds):
        return {}
    def inference_and_backprop(self, feeds, loss):
        return {}, {}

class Looks(GraphExecutor):
    name = "fake-looks"
    def inference(self, feeds):
        return {}
"""

BACKENDS = """
from d5core.levels.operators import OperatorBackend

class Backend(OperatorBackend):
    name = "fake"
    def supported(self):
        return []
    def create(self, op_type, attributes, inputs):
        raise NotImplementedError
"""


@pytest.fixture
def fake_plugins(d5_site: FakeSite) -> Iterator[PluginManager]:
    """Only a fake distribution with two executors and two operator backends is on."""
    d5_site.add(
        "d5-plugin-fakes",
        entry_points={
            "d5.hooks": {"fakes": "fake_hooks"},
            "d5.frameworks": {
                "fake-trains": "fake_executors:Trains",
                "fake-looks": "fake_executors:Looks",
            },
            "d5.operators": {"alpha": "fake_backends:Backend", "beta": "fake_backends:Backend"},
        },
        modules={
            "fake_hooks.py": HOOKS,
            "fake_executors.py": EXECUTORS,
            "fake_backends.py": BACKENDS,
        },
    )
    manager = d5_site.manager({"D5_LOAD_PLUGINS": "d5-plugin-fakes"})
    reset_plugin_manager(manager)
    try:
        yield manager
    finally:
        reset_plugin_manager(None)


def _one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


def test_reference_defaults_to_numpy_when_nothing_names_one(
    fake_plugins: PluginManager,
) -> None:
    assert DEFAULT_REFERENCE == "numpy"
    with pytest.raises(UsageError) as exc:
        reference_name("d5.operators", environ={})
    message = _one_line(exc)
    assert message.startswith("the default reference 'numpy' is not an installed operator")
    assert f"set {REFERENCE_ENV} to one of: alpha, beta" in message


def test_reference_is_read_from_the_environment_variable(fake_plugins: PluginManager) -> None:
    assert reference_name("d5.operators", environ={REFERENCE_ENV: "beta"}) == "beta"
    assert reference_name("d5.frameworks", environ={REFERENCE_ENV: " fake-looks "}) == "fake-looks"


def test_reference_argument_wins_over_the_environment(fake_plugins: PluginManager) -> None:
    assert reference_name("d5.operators", "alpha", environ={REFERENCE_ENV: "beta"}) == "alpha"


def test_unknown_reference_in_the_environment_names_the_installed_ones(
    fake_plugins: PluginManager,
) -> None:
    with pytest.raises(UsageError) as exc:
        reference_name("d5.frameworks", environ={REFERENCE_ENV: "nope"})
    assert _one_line(exc) == (
        "D5_REFERENCE 'nope' is not an installed graph executor; "
        "set D5_REFERENCE to one of: fake-looks, fake-trains"
    )


class _InferenceOnly(GraphExecutor):
    name = "inference-only"

    def inference(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {}


def test_inference_only_executor_suggests_the_installed_executors_that_train(
    fake_plugins: PluginManager,
) -> None:
    with pytest.raises(UsageError) as exc:
        _InferenceOnly(zoo.mlp()).inference_and_backprop({}, "loss")
    assert _one_line(exc) == (
        "the inference-only executor runs inference only; to train, choose one of the "
        "installed executors that train: fake-trains"
    )


def test_inference_only_executor_says_when_no_installed_executor_trains(
    d5_plugin_manager: PluginManager,
) -> None:
    with pytest.raises(UsageError) as exc:
        _InferenceOnly(zoo.mlp()).inference_and_backprop({}, "loss")
    assert "none is installed" in _one_line(exc)
