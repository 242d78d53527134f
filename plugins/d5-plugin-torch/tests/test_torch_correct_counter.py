"""Training accuracy counted on the device (issue 12, item 6).

:class:`DeviceCorrectCounter` counts as one ``(logits.argmax(-1) == labels).sum()`` per
batch would, whatever batches it is given; the trainer's native path on the torch
executor reads it once per epoch, so that a step makes one host sync (its loss), not two.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from d5_plugin_torch.executor import DeviceCorrectCounter

from d5core.api import get_plugin_manager, load_dataset
from d5core.testing.executors import build_network, executor_by_name, with_loss
from d5core.testing.training import StopConditions, Trainer, make_sampler


def _per_batch(batches: list[tuple[torch.Tensor, torch.Tensor]]) -> int:
    return sum(int((lg.argmax(-1) == lb).sum().item()) for lg, lb in batches)


def _batches(sizes: list[int], classes: int = 5, seed: int = 0) -> list[tuple[Any, Any]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for n in sizes:
        logits = torch.randn(n, classes, generator=g)
        logits[0] = 0.0  # a tie: argmax takes the first index
        logits[1, 1:3] = float("nan")  # NaN counts as the largest, the first one wins
        out.append((logits, torch.randint(0, classes, (n,), generator=g)))
    return out


def test_device_counter_counts_as_each_batch_would() -> None:
    g = torch.Generator().manual_seed(1)
    data = [
        *_batches([16, 16, 16, 7]),
        (torch.randn(8, 5, generator=g), torch.randint(0, 5, (8, 1), generator=g)),  # broadcasts
        *_batches([8], classes=7),  # another class axis
        (torch.randn(5, generator=g), torch.tensor(2)),  # no batch axis
    ]
    counter = DeviceCorrectCounter()
    for logits, labels in data:
        counter.add(logits, labels)
    assert counter.take() == _per_batch(data)
    assert counter.take() == 0  # take resets


def test_device_counter_keeps_no_batch_between_steps() -> None:
    counter = DeviceCorrectCounter()
    logits, labels = _batches([16])[0]
    counter.add(logits, labels)
    before = _per_batch([(logits, labels)])
    logits.zero_()  # the caller may reuse its tensors at once: the count is already made
    labels.fill_(3)
    assert counter.take() == before


def _trainer(*, counter: bool) -> Trainer:
    train = load_dataset("synthetic_classification", "train", samples=200, features=8, classes=3)
    net = build_network("mlp", input_shape=(8,), classes=3, hidden=[16], seed=0)
    trained, loss = with_loss(net)
    executor = executor_by_name("torch", trained)
    if not counter:  # the per-step count of an executor without a device counter
        executor.native_correct_counter = None
    opt = get_plugin_manager().load("d5.optimizers", "torch-momentum")(lr=0.1, momentum=0.9)
    return Trainer(
        executor, loss, opt, train, make_sampler("shuffle", len(train), 32, seed=0),
        stop=StopConditions(max_epochs=2), progress=False,
    )  # fmt: skip


def test_torch_training_reads_the_accuracy_once_per_epoch(monkeypatch) -> None:
    reads: list[int] = []
    item = torch.Tensor.item

    def counted(self: torch.Tensor) -> Any:
        reads.append(self.numel())
        return item(self)

    monkeypatch.setattr(torch.Tensor, "item", counted)
    result = _trainer(counter=True).run()
    assert result.optimizer_path == "native" and result.steps == 14
    assert len(reads) == result.steps + result.epochs  # each step's loss, each epoch's count


def test_torch_training_accuracy_counted_per_epoch_equals_the_per_step_count() -> None:
    device, per_step = _trainer(counter=True).run(), _trainer(counter=False).run()
    assert device.losses == per_step.losses
    new, old = (r.metrics["training_accuracy"] for r in (device, per_step))
    assert [(e["epoch"], e["steps"], e["weight"]) for e in new["per_epoch"]] == [
        (e["epoch"], e["steps"], e["weight"]) for e in old["per_epoch"]
    ]
    assert np.allclose(
        [e["accuracy"] for e in new["per_epoch"]], [e["accuracy"] for e in old["per_epoch"]],
        rtol=1e-15, atol=0,
    )  # fmt: skip
    assert 0 < new["value"] < 1
