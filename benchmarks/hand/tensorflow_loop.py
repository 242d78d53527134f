"""The recipe's training written by hand in TensorFlow 2, as its user would: a
``tf.keras.Sequential`` model, a ``tf.GradientTape`` train step wrapped in
``@tf.function``, ``tf.keras.optimizers.SGD`` with momentum, a test pass after every
epoch. The CNN runs channels-last, TensorFlow's layout on CPU.

    .venv/bin/python benchmarks/hand/tensorflow_loop.py digits-mlp

Keras' momentum accumulates ``v = m v - lr g; p += v``: for a constant learning rate the
same trajectory as PyTorch's ``v = m v + g; p -= lr v`` (``v`` scaled by ``-lr``).
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
from _problems import Problem, Result, clock, epoch_batches, he_weights, load, main

layers = tf.keras.layers


def keras_weights(problem: Problem, x_train: np.ndarray, classes: int) -> list[np.ndarray]:
    """``he_weights`` in Keras' layouts: Conv2D kernels ``(kh, kw, in, out)``, Dense
    kernels ``(in, out)``; the first Dense after LeNet-5's Flatten has its inputs
    reordered from PyTorch's ``C*H*W`` flatten to the channels-last ``H*W*C`` one."""
    weights = he_weights(problem, x_train, classes)
    out = []
    for index, w in enumerate(weights):
        if w.ndim == 4:
            w = w.transpose(2, 3, 1, 0)
        elif w.ndim == 2:
            if problem.model != "mlp" and index == 4:  # conv, bias, conv, bias, then this
                h, wd = ((x_train.shape[2] // 2 - 4) // 2), ((x_train.shape[3] // 2 - 4) // 2)
                w = w.reshape(len(w), 16, h, wd).transpose(0, 2, 3, 1).reshape(len(w), -1)
            w = w.T
        out.append(np.ascontiguousarray(w))
    return out


def model_of(problem: Problem, x_train: np.ndarray, classes: int) -> tf.keras.Model:
    """The recipe's network as a Keras model, with the shared initial weights."""
    if problem.model == "mlp":
        model = tf.keras.Sequential([
            tf.keras.Input((x_train.shape[1],)),
            layers.Dense(problem.options["hidden"], activation="relu"),
            layers.Dense(classes),
        ])  # fmt: skip
    else:
        c, h, w = x_train.shape[1:]
        model = tf.keras.Sequential([
            tf.keras.Input((h, w, c)),
            layers.Conv2D(6, 5, padding="same", activation="relu"), layers.MaxPooling2D(2),
            layers.Conv2D(16, 5, activation="relu"), layers.MaxPooling2D(2), layers.Flatten(),
            layers.Dense(120, activation="relu"), layers.Dense(84, activation="relu"),
            layers.Dense(classes),
        ])  # fmt: skip
    model.set_weights(keras_weights(problem, x_train, classes))
    return model


def train(problem: Problem) -> Result:
    t0 = clock()  # the first touch of data
    xa, ya, xb, yb = load(problem)
    classes = int(ya.max()) + 1
    model = model_of(problem, xa, classes)
    if xa.ndim == 4:  # channels-last, once
        xa, xb = xa.transpose(0, 2, 3, 1), xb.transpose(0, 2, 3, 1)
    x_train, y_train = tf.constant(xa), tf.constant(ya)
    x_test, y_test = tf.constant(xb), tf.constant(yb)
    opt = tf.keras.optimizers.SGD(learning_rate=problem.lr, momentum=problem.momentum)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    @tf.function
    def test_step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        logits = model(x, training=False)
        return tf.reduce_sum(tf.cast(tf.argmax(logits, 1) == y, tf.int32))

    setup = clock() - t0
    steps, tested, accuracy, reached = 0, 0.0, 0.0, None
    for epoch in range(problem.epochs):
        for idx in epoch_batches(problem, epoch, len(ya)):
            i = tf.constant(idx)
            loss = train_step(tf.gather(x_train, i), tf.gather(y_train, i))
            loss.numpy()  # the loss of every step is read, as d5 records it
            steps += 1
        started = clock()
        correct = 0
        for s in range(0, len(yb), problem.eval_batch_size):
            end = s + problem.eval_batch_size
            correct += int(test_step(x_test[s:end], y_test[s:end]))
        accuracy = correct / len(yb)
        tested += clock() - started
        if accuracy >= problem.target:
            reached = clock() - t0
            break
    return Result(reached, steps, epoch + 1, accuracy, tested, setup)


if __name__ == "__main__":
    raise SystemExit(main(train))
