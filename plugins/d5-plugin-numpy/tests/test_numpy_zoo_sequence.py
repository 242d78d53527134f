"""The reference executor runs the zoo's sequence models (bert, gpt, vit, lstm) as plain
numpy forwards written from the models' definitions compute them (d5core.testing
.sequence_forward): a wrong graph and a wrong executor are told apart. gpt is causal and
bert ignores the keys it pads."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from d5core.onnx.network import Network
from d5core.testing.executors import SEQUENCE_MODELS, executor_by_name, make_feeds
from d5core.testing.sequence_forward import FORWARDS, TINY


def _forward_options(name: str, options: dict[str, Any]) -> dict[str, Any]:
    keys = {"gpt": ("heads", "tied", "vocab_last"), "bert": ("heads", "padding_mask"),
            "vit": ("heads", "patch"), "lstm": ()}[name]  # fmt: skip
    return {k: options[k] for k in keys if k in options}


def _feeds(net: Network, batch: int = 3, seed: int = 0) -> dict[str, np.ndarray]:
    feeds = make_feeds(net, batch, seed)
    if "input_ids" in feeds:
        feeds["input_ids"][:, -2:] = 0  # id 0 is bert's padding: mask the last keys
        feeds["input_ids"][0, -1] = 3
    return feeds


@pytest.mark.parametrize(
    ("name", "extra"),
    [
        ("gpt", {}),
        ("gpt", {"tied": True, "vocab_last": True, "layers": 1}),
        ("bert", {}),
        ("bert", {"padding_mask": False, "layers": 1}),
        ("vit", {}),
        ("lstm", {}),
        ("lstm", {"bidirectional": False, "layers": 1}),
    ],
)
def test_reference_executor_agrees_with_the_numpy_forward(name: str, extra: dict[str, Any]) -> None:
    options = {**TINY[name], **extra}
    net = Network(SEQUENCE_MODELS[name](**options)).as_float64()
    feeds = _feeds(net)
    if name == "vit":
        feeds["input"] = feeds["input"].astype(np.float64)
    out = executor_by_name("numpy", net).inference(feeds)["output"]
    params = net.parameters
    expected = FORWARDS[name](params, next(iter(feeds.values())), **_forward_options(name, options))
    np.testing.assert_allclose(out, expected, rtol=1e-10, atol=1e-12)


def test_gpt_is_causal_and_bert_ignores_padded_keys() -> None:
    gpt = Network(SEQUENCE_MODELS["gpt"](**TINY["gpt"]))
    run = executor_by_name("numpy", gpt).inference
    ids = make_feeds(gpt, 2, seed=3)["input_ids"]
    later = ids.copy()
    later[:, 3:] = (later[:, 3:] + 1) % 11
    a, b = run({"input_ids": ids})["output"], run({"input_ids": later})["output"]
    np.testing.assert_allclose(a[:, :, :3], b[:, :, :3], rtol=1e-5, atol=1e-6)
    assert np.abs(a[:, :, 3:] - b[:, :, 3:]).max() > 1e-3
    # bert: padded keys (id 0) are dropped from every attention and the classifier reads
    # position 0, so nothing at padded positions (their position embeddings) matters.
    for padding_mask in (True, False):
        bert = Network(SEQUENCE_MODELS["bert"](**TINY["bert"], padding_mask=padding_mask))
        executor = executor_by_name("numpy", bert)
        ids = np.array([[5, 3, 0, 0, 0], [2, 7, 9, 4, 0]])
        before = executor.inference({"input_ids": ids})["output"]
        positions = bert.parameters["embed.positions"].copy()
        positions[4] += np.linspace(-1.0, 1.0, positions.shape[1])  # LayerNorm keeps it
        executor.set_parameters({"embed.positions": positions})
        after = executor.inference({"input_ids": ids})["output"]
        if padding_mask:
            np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-6)
        else:
            assert np.abs(after - before).max() > 1e-3
