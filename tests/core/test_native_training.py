"""The native training path is the declared protocol ``NativeTraining``: the trainer takes
it for an executor that implements the protocol and an optimizer of its framework."""

from __future__ import annotations

from typing import Any

import pytest

from d5core.api import CorrectCounter, NativeTraining
from d5core.lv2.trainer import native_capable


class _Native:
    name = "fake"

    def to_native(self, feeds: Any) -> Any:
        return dict(feeds)

    def native_parameters(self) -> Any:
        return {}

    def native_train_step(self, feeds: Any, loss: str) -> Any:
        return {}, {}


class _WithoutParameters:
    name = "fake"

    def to_native(self, feeds: Any) -> Any:
        return dict(feeds)

    def native_train_step(self, feeds: Any, loss: str) -> Any:
        return {}, {}


class _Optimizer:
    native = "fake"

    def bind(self, executor: Any) -> None: ...

    def native_step(self, grads: Any) -> None: ...


class _Counter:
    def add(self, logits: Any, labels: Any) -> None: ...

    def take(self) -> int:
        return 0


def test_an_executor_with_the_three_methods_is_native_training():
    assert isinstance(_Native(), NativeTraining)
    assert native_capable(_Native(), _Optimizer())


def test_an_executor_without_native_parameters_is_not_native_training():
    """A native optimizer binds to the executor's live tensors: without
    ``native_parameters`` it has nothing to bind to, so the trainer keeps to numpy."""
    assert not isinstance(_WithoutParameters(), NativeTraining)
    assert not native_capable(_WithoutParameters(), _Optimizer())


@pytest.mark.parametrize(
    "optimizer",
    [
        type("OtherFramework", (_Optimizer,), {"native": "torch"})(),
        type("NotNative", (_Optimizer,), {"native": None})(),
        type("Unbindable", (), {"native": "fake", "native_step": lambda self, g: None})(),
    ],
    ids=["another-framework", "not-native", "no-bind"],
)
def test_the_optimizer_must_be_a_native_one_of_the_executors_framework(optimizer):
    assert not native_capable(_Native(), optimizer)


def test_a_correct_counter_is_anything_with_add_and_take():
    assert isinstance(_Counter(), CorrectCounter)
    assert not isinstance(object(), CorrectCounter)
