"""Training on the jax executor: ``d5 run`` with the digits recipe, the whole step
compiled as one call, and the native path against the numpy path, the reference and
torch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from d5_plugin_jax._jax import jax as _jax
from d5_plugin_jax.optimizers import FusedStep, JaxSGD

from d5core.api import get_plugin_manager
from d5core.testing.training import (
    Trainer,
    d5_run_json,
    digits_trainer,
    prepare,
)

RECIPE = Path(__file__).resolve().parents[3] / "recipes" / "digits-mlp.toml"
jax = _jax()


def _trainer(
    optimizer: str, lr: float, *, native: bool | None, executor: str = "jax", steps: int = 8
) -> Trainer:
    """The digits MLP in float64, ``lr / (1 + step)``."""
    opt = get_plugin_manager().load("d5.optimizers", optimizer)(lr=lr)
    schedule = lambda s: lr / (1 + s)  # noqa: E731
    return digits_trainer(executor, opt, steps=steps, schedule=schedule, native=native)


@pytest.mark.parametrize(("name", "lr"), [("momentum", 0.1), ("adam", 1e-2)])
def test_native_path_loss_curve_equals_the_numpy_reference_optimizers(name: str, lr: float) -> None:
    native = _trainer(f"jax-{name}", lr, native=None)
    reference = _trainer(name, lr, native=None)
    got, want = native.run(), reference.run()
    assert got.optimizer_path == "native" and want.optimizer_path == "numpy"
    assert len(got.losses) == len(want.losses) == 8
    np.testing.assert_allclose(got.losses, want.losses, rtol=1e-10, atol=1e-12)
    assert got.metrics["training_accuracy"]["value"] == want.metrics["training_accuracy"]["value"]
    expected = reference.executor.get_parameters()
    for name_, value in native.executor.get_parameters().items():
        np.testing.assert_allclose(value, expected[name_], rtol=1e-10, atol=1e-12)


def test_the_native_path_replaces_the_executors_own_arrays() -> None:
    trainer = _trainer("jax-sgd", 0.1, native=None, steps=2)
    before = trainer.executor.get_parameters()
    trainer.run()
    assert trainer.params == {}  # nothing went through numpy
    live = dict(trainer.executor.native_parameters())
    after = trainer.executor.get_parameters()
    assert live
    for name, array in live.items():
        assert isinstance(array, jax.Array)
        np.testing.assert_array_equal(np.asarray(array), after[name])
        assert not np.array_equal(after[name], before[name]), name


def _bound(optimizer: str, lr: float = 0.1) -> tuple[Any, Any, str, dict[str, Any]]:
    trainer = _trainer(optimizer, lr, native=True, steps=1)
    executor = trainer.executor
    opt = get_plugin_manager().load("d5.optimizers", optimizer)(lr=lr)
    opt.bind(executor)
    x, y = trainer.train_set.batch(np.arange(4))
    feeds = executor.to_native({trainer.input: x.astype(np.float64), "labels": y})
    return executor, opt, trainer.loss, feeds


def test_a_bound_jax_optimizer_makes_the_train_step_one_compiled_update() -> None:
    executor, opt, loss, feeds = _bound("jax-momentum")
    before = executor.get_parameters()
    # the same step, unfused: the gradients of the executor's forward and backward pass
    _, grads = executor.run_train_step(feeds, loss)
    outputs, marker = executor.native_train_step(feeds, loss)
    assert isinstance(marker, FusedStep) and not marker  # holds no gradient
    for name, value in executor.get_parameters().items():  # nothing written yet
        np.testing.assert_array_equal(value, before[name])
    opt.native_step(marker)  # the step's update, committed
    after = executor.get_parameters()
    for name in executor.grad_names:
        expected = before[name] - 0.1 * np.asarray(grads[name])
        np.testing.assert_allclose(after[name], expected, rtol=1e-12, atol=1e-14)
    opt.native_step(marker)  # committed once: a second call changes nothing
    for name, value in executor.get_parameters().items():
        np.testing.assert_array_equal(value, after[name])
    assert opt.state_dict()["steps"] == {n: 1 for n in executor.grad_names}
    assert np.isfinite(float(outputs[loss].item()))


def test_a_step_the_trainer_does_not_commit_leaves_the_parameters() -> None:
    # the trainer calls native_step only for a finite loss
    executor, opt, loss, feeds = _bound("jax-adam")
    bad = dict(feeds)
    name = next(iter(bad))
    bad[name] = np.full(np.shape(bad[name]), np.nan)
    bad = executor.to_native(bad)
    before = executor.get_parameters()
    outputs, _ = executor.native_train_step(bad, loss)
    assert not np.isfinite(float(np.asarray(outputs[loss]).reshape(-1)[0]))
    for key, value in executor.get_parameters().items():
        np.testing.assert_array_equal(value, before[key])
    assert not any(opt.state_dict()["steps"].values())  # no step counted


def test_a_new_learning_rate_does_not_compile_the_step_again() -> None:
    traced: list[int] = []

    class CountingSGD(JaxSGD):
        """Counts the Python calls of chain: one per trace of the compiled step."""

        def chain(self, learning_rate: Any) -> Any:
            traced.append(1)
            return super().chain(learning_rate)

    executor, _, loss, feeds = _bound("jax-sgd")
    opt = CountingSGD(lr=0.1)
    opt.bind(executor)
    opt.native_step(executor.native_train_step(feeds, loss)[1])
    first = len(traced)
    before = executor.get_parameters()
    for lr in (0.05, 0.01):
        opt.lr = lr
        _, marker = executor.native_train_step(feeds, loss)
        assert isinstance(marker, FusedStep)
        opt.native_step(marker)
    assert len(traced) == first
    assert any(not np.array_equal(v, before[k]) for k, v in executor.get_parameters().items())


def test_the_correct_counter_counts_what_the_steps_added() -> None:
    executor, _, _, _ = _bound("jax-sgd")
    counter = executor.native_correct_counter()
    jnp = jax.numpy
    counter.add(jnp.asarray([[0.0, 1.0], [2.0, 1.0], [np.nan, 0.0]]), jnp.asarray([1, 1, 0]))
    counter.add(jnp.asarray([[3.0, 1.0]]), jnp.asarray([0]))
    assert counter.take() == 3
    assert counter.take() == 0


def _d5_run(d5_cli: Any, tmp_path: Path, *sets: str) -> dict[str, Any]:
    return d5_run_json(d5_cli, RECIPE, tmp_path / "r.sqlite", *sets)


def test_d5_run_with_jax_momentum_takes_the_native_path(d5_cli: Any, tmp_path: Path) -> None:
    sets = ["executor=jax", "optimizer=jax-momentum"]
    _d5_run(d5_cli, tmp_path, *sets)
    assert prepare(RECIPE, sets, seed=None).trainer.optimizer_path == "native"


def test_d5_run_digits_on_jax_passes_with_the_recipes_numpy_optimizer(
    d5_cli: Any, tmp_path: Path
) -> None:
    """The recipe's ``momentum`` is the numpy reference: the run takes the numpy path."""
    _d5_run(d5_cli, tmp_path, "executor=jax")
    assert prepare(RECIPE, ["executor=jax"], seed=None).trainer.optimizer_path == "numpy"


def test_the_compiled_step_of_a_batchnorm_network_follows_the_numpy_executor() -> None:
    """Convolution, BatchNormalization (running statistics written after each step), a
    static shape: three fused jax-nesterov steps end where the numpy executor with the
    reference nesterov ends (float64)."""
    from d5_plugin_jax.executor import JaxExecutor

    from d5core.testing.executors import executor_by_name
    from d5core.testing.networks import cnn, feeds_for, float64_model

    model = float64_model(cnn())
    fused = JaxExecutor(model)
    reference: Any = executor_by_name("numpy", model)
    opt = get_plugin_manager().load("d5.optimizers", "jax-nesterov")(lr=0.1)
    ref = get_plugin_manager().load("d5.optimizers", "nesterov")(lr=0.1)
    opt.bind(fused)
    for step in range(3):
        feeds = {k: v.astype(np.float64) if v.dtype.kind == "f" else v
                 for k, v in feeds_for(model, seed=step).items()}  # fmt: skip
        outputs, marker = fused.native_train_step(fused.to_native(feeds), "loss")
        opt.native_step(marker)
        fused.apply_running_stats()
        want, grads = reference.inference_and_backprop(feeds, "loss")
        params = reference.get_parameters()
        ref.step(params, grads)
        reference.set_parameters(params)
        reference.apply_running_stats()
        np.testing.assert_allclose(float(outputs["loss"].item()), want["loss"], rtol=1e-12)
    expected = reference.get_parameters()
    got = fused.get_parameters()
    assert {"mu", "var"} <= set(got)
    for name, value in expected.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-10, atol=1e-12, err_msg=name)
    assert not np.array_equal(got["mu"], _cnn_initial("mu"))


def _cnn_initial(name: str) -> np.ndarray:
    """The initial value of the parameter ``name`` of the test cnn (float64)."""
    from onnx import numpy_helper

    from d5core.testing.networks import cnn

    (init,) = [i for i in cnn().graph.initializer if i.name == name]
    return numpy_helper.to_array(init).astype(np.float64)
