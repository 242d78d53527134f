"""Level 1 for executor plugins' tests: zoo networks, executors by name, seeded feeds, a
loss for training, the per-node breakdown and the ONNX node conformance cases.

Each name here is d5's own (what ``d5 bench net``, ``d5 validate net`` and ``d5
conformance`` use), reached through this kit so that a plugin's tests import no internal
module of d5core.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import onnx

from d5core.lv1 import zoo as _zoo
from d5core.lv1 import zoo_sequence as _zoo_sequence
from d5core.lv1.conformance import ConformanceReport, node_cases, run_case
from d5core.lv1.runner import (
    executor_by_name,
    layer_breakdown,
    load_model,
    make_feeds,
    traced_node_times,
    with_loss,
)
from d5core.onnx.network import Network

__all__ = [
    "SEQUENCE_MODELS",
    "ZOO_MODELS",
    "ConformanceReport",
    "build_network",
    "executor_by_name",
    "layer_breakdown",
    "load_model",
    "make_feeds",
    "node_cases",
    "run_case",
    "traced_node_times",
    "with_loss",
]

#: The zoo's image models by name, each building an ONNX model (``ZOO_MODELS["mlp"](batch=2)``).
ZOO_MODELS: Mapping[str, Callable[..., onnx.ModelProto]] = _zoo.ZOO

#: The zoo's sequence models (``gpt``, ``bert``, ``vit``, ``lstm``) by name, each building
#: an ONNX model from its keyword options.
SEQUENCE_MODELS: Mapping[str, Callable[..., onnx.ModelProto]] = {
    name: getattr(_zoo_sequence, name) for name in ("gpt", "bert", "vit", "lstm")
}


def build_network(name: str, **kwargs: Any) -> Network:
    """The zoo model ``name`` as a :class:`~d5core.api.Network`, its options checked as
    ``d5 bench net --model`` checks them."""
    return _zoo.build(name, **kwargs)
