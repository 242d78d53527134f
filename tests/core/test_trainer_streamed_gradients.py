"""The numpy path takes an executor's ``inference_and_backprop_streamed`` when it has one.

An executor may hand the gradients over as a mapping that reads each one back when the
optimizer asks for it, in the order its backward pass finishes them (MXNet's does), so
that the optimizer's numpy step overlaps the rest of that pass. The trainer must call it
instead of ``inference_and_backprop`` and train exactly as before.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
from native_fakes import BATCH, SIZE, Data, Executor, NumpySGD

from d5core.lv2.samplers import make_sampler
from d5core.lv2.trainer import StopConditions, Trainer


class _ReadLog(Mapping[str, np.ndarray]):
    """Gradients computed on first read, each read logged."""

    def __init__(self, grads: dict[str, np.ndarray], log: list[str]) -> None:
        self._grads, self._log = grads, log

    def __getitem__(self, name: str) -> np.ndarray:
        self._log.append(name)
        return self._grads[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._grads)

    def __len__(self) -> int:
        return len(self._grads)


class _Streaming(Executor):
    def __init__(self) -> None:
        super().__init__(counter=False)
        self.streamed_calls = 0
        self.eager_calls = 0
        self.reads: list[str] = []

    def inference_and_backprop(self, feeds: Any, loss: str) -> Any:
        self.eager_calls += 1
        return super().inference_and_backprop(feeds, loss)

    def inference_and_backprop_streamed(self, feeds: Any, loss: str) -> Any:
        self.streamed_calls += 1
        outputs, grads = super().inference_and_backprop(feeds, loss)
        return outputs, _ReadLog(grads, self.reads)


def _train(executor: Executor) -> Any:
    data = Data()
    trainer = Trainer(
        executor, "loss", NumpySGD(), data, make_sampler("shuffle", SIZE, BATCH, seed=0),
        test_set=data, progress=False, native=False, stop=StopConditions(max_epochs=2),
    )  # fmt: skip
    return trainer.run()


def test_the_numpy_path_steps_from_streamed_gradients_and_trains_as_before():
    streaming = _Streaming()
    streamed = _train(streaming)
    plain_executor = Executor(counter=False)
    plain = _train(plain_executor)
    steps = 2 * -(-SIZE // BATCH)
    assert streaming.streamed_calls == steps and streaming.eager_calls == 0
    assert streaming.reads == ["w"] * steps  # the optimizer read them through the mapping
    assert streamed.losses == plain.losses
    assert np.array_equal(streaming.w, plain_executor.w)
    assert streamed.final_test_accuracy == plain.final_test_accuracy


def test_an_executor_whose_streamed_method_is_not_callable_gets_the_plain_one():
    class Hidden(_Streaming):
        inference_and_backprop_streamed = None  # type: ignore[assignment]

    hidden = Hidden()
    result = _train(hidden)
    assert hidden.eager_calls == 2 * -(-SIZE // BATCH)
    assert result.losses == _train(Executor(counter=False)).losses
