"""``benchmarks/hand/jax_loop.py``, the digits and CNN training written by hand in JAX
that ``benchmarks/train_e2e.py`` holds ``d5 run`` against: it must compute what d5
computes, or its ratio means nothing. Checked here against d5's numpy reference: the
hand networks give the zoo networks' logits, and the hand train step (one ``jax.jit`` with
the optax update) moves the weights as d5's ``momentum`` optimizer moves them.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from d5_plugin_jax._jax import jax as _jax

from d5core.testing.executors import build_network, executor_by_name, with_loss

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks" / "hand"))
jnp = _jax().numpy  # d5's XLA settings first: the hand loop imports jax itself, and the
# other tests of this process must find XLA configured as d5 configures it

import _problems  # noqa: E402
import jax_loop  # noqa: E402

#: Examples per check: small, and not a multiple of the batch's structure.
EXAMPLES = 7


def _zoo(problem: _problems.Problem, x_train: np.ndarray, classes: int) -> Any:
    """The zoo network d5 trains for ``problem``, with its seeded initial weights."""
    options = {"hidden": [problem.options["hidden"]]} if problem.model == "mlp" else {}
    return build_network(problem.model, input_shape=x_train.shape[1:], classes=classes,
                         seed=problem.seed, **options)  # fmt: skip


@pytest.mark.parametrize("recipe", sorted(_problems.PROBLEMS))
def test_hand_network_gives_the_logits_of_the_zoo_network(recipe: str) -> None:
    problem = _problems.PROBLEMS[recipe]
    xa, ya = _problems.load(problem)[:2]
    classes = int(ya.max()) + 1
    weights = [jnp.asarray(w) for w in _problems.he_weights(problem, xa, classes)]
    hand = np.asarray(jax_loop.model_of(problem)(weights, jnp.asarray(xa[:EXAMPLES])))
    network = _zoo(problem, xa, classes)
    theirs = executor_by_name("numpy", network).inference({"input": xa[:EXAMPLES]})
    (logits,) = theirs.values()
    np.testing.assert_allclose(hand, logits, rtol=1e-4, atol=1e-5)


def test_hand_step_moves_the_weights_as_d5s_momentum_does() -> None:
    # Three steps from the shared initial weights: the hand step (optax.sgd with momentum,
    # jitted) against the numpy executor's gradients with PyTorch's momentum rule, which
    # d5's reference optimizer follows: v = m v + g; p -= lr v.
    problem = _problems.PROBLEMS["synthetic-cnn"]
    xa, ya = _problems.load(problem)[:2]
    classes = int(ya.max()) + 1
    params = [jnp.asarray(w) for w in _problems.he_weights(problem, xa, classes)]
    opt, step = jax_loop.step_of(problem, jax_loop.model_of(problem), jnp.asarray(xa),
                                 jnp.asarray(ya.astype(np.int32)))  # fmt: skip
    state = opt.init(params)
    trained, loss = with_loss(_zoo(problem, xa, classes))
    executor = executor_by_name("numpy", trained)
    names = list(trained.parameters)
    velocity = {n: np.zeros_like(v) for n, v in trained.parameters.items()}
    batches = _problems.epoch_batches(problem, 0, len(ya))
    for _, idx in zip(range(3), batches, strict=False):
        params, state, hand_loss = step(params, state, idx)
        outputs, grads = executor.inference_and_backprop({"input": xa[idx], "labels": ya[idx]},
                                                         loss)  # fmt: skip
        assert float(hand_loss) == pytest.approx(float(outputs[loss]), rel=1e-5)
        for n in names:
            velocity[n] = problem.momentum * velocity[n] + grads[n]
            trained.set_parameter(n, trained.parameters[n] - problem.lr * velocity[n])
        executor = executor_by_name("numpy", trained)
    assert len(params) == len(names)
    for n, mine in zip(names, params, strict=True):
        np.testing.assert_allclose(np.asarray(mine), trained.parameters[n], rtol=1e-4, atol=1e-6,
                                   err_msg=n)  # fmt: skip


def test_hand_loop_trains_digits_to_the_target() -> None:
    # The whole loop, as train_e2e runs it: digits reaches the recipe's target within its
    # epochs, with a test pass per epoch and every step counted.
    problem = _problems.PROBLEMS["digits-mlp"]
    result = jax_loop.train(problem)
    size = len(_problems.load(problem)[1])
    per_epoch = -(-size // problem.batch_size)
    assert result.time_to_accuracy is not None
    assert result.final_test_accuracy >= problem.target
    assert result.steps == result.epochs * per_epoch
    assert result.epochs < problem.epochs
