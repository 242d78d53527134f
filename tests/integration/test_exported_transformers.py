"""Models nobody here wrote: Hugging Face ``BertModel`` and ``GPT2LMHeadModel``, built
from small configurations with a fixed torch seed (nothing is downloaded), exported by
``torch.onnx.export`` (TorchScript exporter, opset 17), then run through ``d5 validate
net`` and ``d5 bench net`` on every executor in the environment.

Every executor's outputs are compared with onnxruntime's on the same feeds; ``d5
validate net`` compares them (and the float64 gradients of executors that train) with
the reference executor's. transformers is a test-only dependency.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest

from d5core.cli.output import read_json
from d5core.lv1.runner import executor_by_name, make_feeds
from d5core.onnx.network import Network

EXECUTORS = ("numpy", "torch", "onnxruntime", "tensorflow", "jax")
MODELS = ("bert", "gpt2")
VOCAB, SEQ, BATCH = 200, 16, 2


def _export(name: str, path: Path) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded
    import torch
    from transformers import BertConfig, BertModel, GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    if name == "bert":
        config = BertConfig(
            hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=128, vocab_size=VOCAB, max_position_embeddings=64,
        )  # fmt: skip
        model: torch.nn.Module = BertModel(config)
        field = "last_hidden_state"
    else:
        config = GPT2Config(n_embd=64, n_layer=2, n_head=2, vocab_size=VOCAB, n_positions=64)
        model = GPT2LMHeadModel(config)
        field = "logits"

    class Wrapper(torch.nn.Module):
        """Calls the model with keyword arguments and returns a plain tensor."""

        def __init__(self) -> None:
            super().__init__()
            self.m = model.eval()

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return getattr(self.m(input_ids=ids), field)

    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    # the TorchScript exporter warns about every Python branch it traces through
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            Wrapper(), (ids,), str(path), dynamo=False, opset_version=17,
            input_names=["input_ids"], output_names=["output"],
        )  # fmt: skip
    # tell d5's feed generation the vocabulary (else ids stay below the output's axis 1)
    exported = onnx.load(str(path))
    entry = exported.metadata_props.add()
    entry.key, entry.value = "d5.input_high.input_ids", str(VOCAB)
    onnx.save(exported, str(path))


@pytest.fixture(scope="session")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The two exported models, once per test session."""
    folder = tmp_path_factory.mktemp("hf-export")
    paths = {}
    for name in MODELS:
        paths[name] = folder / f"{name}.onnx"
        _export(name, paths[name])
    return paths


@pytest.fixture(autouse=True)
def _private_db(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("D5_DB", str(tmp_path / "results.sqlite"))
    monkeypatch.delenv("D5_REFERENCE", raising=False)


def test_exports_are_the_models_asked_for(exported: dict[str, Path]) -> None:
    bert, gpt2 = Network.load(exported["bert"]), Network.load(exported["gpt2"])
    assert [(i.name, i.shape, i.dtype) for i in bert.inputs] == [
        ("input_ids", (BATCH, SEQ), "int64")
    ]
    assert bert.outputs[0].shape == (BATCH, SEQ, 64)
    assert gpt2.outputs[0].shape == (BATCH, SEQ, VOCAB)
    assert {"LayerNormalization", "Softmax", "Erf"} <= {n.op_type for n in bert.nodes}
    assert {"Trilu", "Split", "Tanh"} <= {n.op_type for n in gpt2.nodes}
    ids = make_feeds(bert, BATCH)["input_ids"]
    assert ids.max() >= SEQ and ids.max() < VOCAB, "ids span the vocabulary"


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("model", MODELS)
def test_outputs_agree_with_onnxruntime(model: str, executor: str, exported) -> None:  # type: ignore[no-untyped-def]
    import onnxruntime

    network = Network.load(exported[model])
    feeds = make_feeds(network, BATCH, seed=0)
    session = onnxruntime.InferenceSession(str(exported[model]), providers=["CPUExecutionProvider"])
    (expected,) = session.run(["output"], feeds)
    actual = executor_by_name(executor, network).inference(feeds)["output"]
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("model", MODELS)
def test_validate_net(model: str, executor: str, exported, d5_cli) -> None:  # type: ignore[no-untyped-def]
    result = d5_cli("validate", "net", str(exported[model]), "--executor", executor, "--json")
    trains = executor != "onnxruntime"
    report = read_json(result.stdout, "validate net")
    assert result.exit_code == 0, report["failures"]
    assert report["against"] == "numpy"
    # the reference runs every node with d5's own operators (GPT-2's Split and Trilu
    # too), so float64 gradients are checked against it, none given up
    assert report["fallback"] == {}
    assert [o["passed"] for o in report["outputs"]] == [True]
    if trains:
        assert len(report["gradients"]) == len(Network.load(exported[model]).trainable)
    else:
        assert report["gradients"] == []


@pytest.mark.parametrize(
    ("model", "executors"),
    [("gpt2", EXECUTORS), ("bert", ("numpy", "onnxruntime"))],  # worker start-up is slow
)
def test_bench_net_times_the_exports(
    model: str, executors: tuple[str, ...], exported, d5_cli
) -> None:  # type: ignore[no-untyped-def]
    result = d5_cli(
        "bench", "net", str(exported[model]), "--executors", ",".join(executors),
        "--batch", str(BATCH), "--processes", "1", "--time-budget", "0.1",
        "--min-samples", "6", "--max-samples", "6", "--warmup", "1", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    rows = read_json(result.stdout, "bench net")
    assert [r["executor"] for r in rows] == list(executors)
    for row in rows:
        assert row["median"] > 0
        assert row["throughput"] == pytest.approx(BATCH / row["median"])


def test_a_batch_the_export_cannot_run_is_refused_in_one_line(exported, d5_cli) -> None:  # type: ignore[no-untyped-def]
    result = d5_cli("bench", "net", str(exported["bert"]), "--executors", "numpy", "--batch", "3")
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    assert "has a fixed batch of 2" in result.stderr
