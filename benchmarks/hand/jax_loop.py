"""The recipe's training written by hand in JAX, as its user would: the parameters as a
list of arrays, the network as a function of them (``jax.numpy`` and ``jax.lax``),
``optax.sgd`` with momentum, the whole train step (loss, ``jax.value_and_grad``, the
optax update) in one ``jax.jit``, a jitted test pass after every epoch.

    .venv/bin/python benchmarks/hand/jax_loop.py digits-mlp

The data lives on the device once; a step receives the batch's indices and gathers its
examples inside the jitted function. Like d5, each new batch shape (the smaller last
batch of an epoch, the last test batch) compiles once.

optax's momentum keeps ``t = m t + g; p -= lr t``: PyTorch's convention, the same steps.
The loss is the batch mean of the cross-entropy, as d5's ``cross_entropy``. The CNN keeps
the data's channels-first layout (``NCHW`` images, ``OIHW`` kernels): XLA chooses the
layouts it computes in itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from _problems import Problem, Result, clock, epoch_batches, he_weights, load, main
from jax import lax

Params = list[jax.Array]


def _conv(x: jax.Array, w: jax.Array, b: jax.Array, pad: int) -> jax.Array:
    y = lax.conv_general_dilated(
        x, w, window_strides=(1, 1), padding=((pad, pad), (pad, pad)),
        dimension_numbers=("NCHW", "OIHW", "NCHW"),
    )  # fmt: skip
    return y + b[None, :, None, None]


def _pool(x: jax.Array) -> jax.Array:
    pooled: jax.Array = lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2),
                                          "VALID")  # fmt: skip
    return pooled


def _dense(x: jax.Array, w: jax.Array, b: jax.Array) -> jax.Array:
    return x @ w.T + b  # PyTorch's (out, in) weights, as he_weights gives them


def model_of(problem: Problem) -> Callable[[Params, jax.Array], jax.Array]:
    """The recipe's network as a function of its parameters (``he_weights``' order)."""
    if problem.model == "mlp":

        def mlp(p: Params, x: jax.Array) -> jax.Array:
            return _dense(jax.nn.relu(_dense(x, p[0], p[1])), p[2], p[3])

        return mlp

    def lenet5(p: Params, x: jax.Array) -> jax.Array:
        x = _pool(jax.nn.relu(_conv(x, p[0], p[1], 2)))
        x = _pool(jax.nn.relu(_conv(x, p[2], p[3], 0)))
        x = x.reshape(x.shape[0], -1)  # C*H*W, as PyTorch's Flatten
        x = jax.nn.relu(_dense(x, p[4], p[5]))
        x = jax.nn.relu(_dense(x, p[6], p[7]))
        return _dense(x, p[8], p[9])

    return lenet5


def step_of(
    problem: Problem, forward: Callable[[Params, jax.Array], jax.Array],
    x_train: jax.Array, y_train: jax.Array,
) -> tuple[Any, Callable[[Params, Any, Any], tuple[Params, Any, jax.Array]]]:  # fmt: skip
    """The recipe's optimizer (``optax.sgd`` with momentum) and its train step, jitted
    whole: ``step(params, state, indices)`` gathers the batch, takes the mean
    cross-entropy's gradient, applies the update and returns the new parameters, the new
    optimizer state and the loss."""
    opt = optax.sgd(learning_rate=problem.lr, momentum=problem.momentum)

    def loss_of(p: Params, x: jax.Array, y: jax.Array) -> jax.Array:
        losses: jax.Array = optax.softmax_cross_entropy_with_integer_labels(forward(p, x), y)
        return losses.mean()

    @jax.jit
    def step(p: Params, state: Any, idx: Any) -> tuple[Params, Any, jax.Array]:
        loss, grads = jax.value_and_grad(loss_of)(p, x_train[idx], y_train[idx])
        updates, state = opt.update(grads, state, p)
        return optax.apply_updates(p, updates), state, loss

    return opt, step


def train(problem: Problem) -> Result:
    t0 = clock()  # the first touch of data
    xa, ya, xb, yb = load(problem)
    forward = model_of(problem)
    params: Params = [jnp.asarray(w) for w in he_weights(problem, xa, int(ya.max()) + 1)]
    x_train, y_train = jnp.asarray(xa), jnp.asarray(ya.astype(np.int32))
    x_test, y_test = jnp.asarray(xb), jnp.asarray(yb.astype(np.int32))
    opt, train_step = step_of(problem, forward, x_train, y_train)
    opt_state = opt.init(params)

    @jax.jit
    def correct_of(p: Params, x: jax.Array, y: jax.Array) -> jax.Array:
        return jnp.sum(jnp.argmax(forward(p, x), axis=1) == y)

    setup = clock() - t0
    steps, tested, accuracy, reached = 0, 0.0, 0.0, None
    for epoch in range(problem.epochs):
        for idx in epoch_batches(problem, epoch, len(ya)):
            params, opt_state, loss = train_step(params, opt_state, idx)
            float(loss)  # the loss of every step is read, as d5 records it
            steps += 1
        started = clock()
        correct = 0
        for s in range(0, len(yb), problem.eval_batch_size):
            end = s + problem.eval_batch_size
            correct += int(correct_of(params, x_test[s:end], y_test[s:end]))
        accuracy = correct / len(yb)
        tested += clock() - started
        if accuracy >= problem.target:
            reached = clock() - t0
            break
    return Result(reached, steps, epoch + 1, accuracy, tested, setup)


if __name__ == "__main__":
    raise SystemExit(main(train))
