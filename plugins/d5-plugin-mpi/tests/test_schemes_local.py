"""Distributed optimizers and compressors in one process: compressor properties, option
errors, and every scheme on a single-rank communicator (where it is the local step)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from d5_plugin_mpi import schemes

from d5core.api import DistributedOptimizer, UsageError, get_plugin_manager
from d5core.testing.training import SingleProcessCommunicator

NAMES = ["allreduce", "parameter-server", "async-parameter-server", "model-averaging", "dpsgd"]


def sgd(lr: float = 0.1) -> Any:
    return get_plugin_manager().load("d5.optimizers", "sgd")(lr=lr)


def test_topk_keeps_k_entries_and_feeds_back_the_rest() -> None:
    c = schemes.TopK(ratio=0.1)
    g = np.random.default_rng(0).standard_normal((5, 7))
    idx, values = c.compress("w", g)
    k = math.ceil(0.1 * g.size)
    assert len(idx) == len(values) == k == c.k(g.size)
    flat = g.reshape(-1)
    assert set(idx.tolist()) == set(np.argsort(-np.abs(flat))[:k].tolist())
    sent = c.decompress((idx, values), g.shape, g.dtype)
    assert np.count_nonzero(sent) == k
    np.testing.assert_array_equal(c.residuals["w"], g - sent)
    g2 = np.random.default_rng(1).standard_normal((5, 7))
    sent2 = c.decompress(c.compress("w", g2), g.shape, g.dtype)
    # error feedback: nothing is lost, it is only delayed
    np.testing.assert_allclose(sent + sent2 + c.residuals["w"], g + g2, atol=1e-12)
    assert c.payload_nbytes(g.size, 8) == [idx.nbytes, values.nbytes]


def test_qsgd_is_unbiased_and_seeded() -> None:
    g = np.random.default_rng(2).standard_normal(50)
    c = schemes.QSGD(bits=3, seed=5)
    norm, q = c.compress("w", g)
    assert q.dtype == np.int8 and np.abs(q).max() <= c.levels == 3
    assert norm[0] == pytest.approx(np.linalg.norm(g))
    draws = 20000
    mean = sum(c.decompress(c.compress("w", g), g.shape, g.dtype) for _ in range(draws)) / draws
    step = np.linalg.norm(g) / c.levels  # one quantization level
    # each entry's quantization noise has std <= step/2: allow 5 standard errors
    np.testing.assert_allclose(mean, g, rtol=0, atol=5 * step / 2 / math.sqrt(draws))
    assert np.abs(c.decompress((norm, q), g.shape, g.dtype) - g).max() > 0.1  # not trivial
    a, b = schemes.QSGD(bits=3, seed=5), schemes.QSGD(bits=3, seed=5)
    np.testing.assert_array_equal(a.compress("w", g)[1], b.compress("w", g)[1])
    assert "w" not in a.residuals  # no error feedback by default
    assert c.payload_nbytes(50, 8) == [8, 50]


def test_sign_preserves_signs_and_feeds_back() -> None:
    g = np.random.default_rng(3).standard_normal((4, 9)).astype(np.float32)
    c = schemes.Sign()
    bits, scale = c.compress("w", g)
    assert bits.dtype == np.uint8 and bits.size == math.ceil(g.size / 8)
    out = c.decompress((bits, scale), g.shape, g.dtype)
    np.testing.assert_array_equal(np.sign(out), np.sign(g))
    assert scale[0] == pytest.approx(np.abs(g).mean())
    np.testing.assert_allclose(c.residuals["w"], g - out, atol=1e-6)


def test_make_compressor_specs() -> None:
    assert schemes.make_compressor(None) is None
    assert isinstance(schemes.make_compressor("sign"), schemes.Sign)
    topk = schemes.make_compressor({"name": "topk", "ratio": 0.5})
    assert isinstance(topk, schemes.TopK) and topk.ratio == 0.5
    assert schemes.make_compressor(topk) is topk


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"name": "topk", "ratio": 0}, "ratio must be in (0, 1]"),
        ({"name": "qsgd", "bits": 1}, "bits must be an integer in 2..16"),
        ({"name": "zip"}, "unknown compression 'zip'"),
        ({"name": "sign", "ratio": 0.1}, "unknown option"),
        ({"ratio": 0.1}, "mapping with 'name'"),
    ],
)
def test_bad_compression_is_a_usage_error(spec: Any, message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        schemes.make_compressor(spec)


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("ring", {}, "unknown distributed optimizer 'ring'"),
        ("allreduce", {"period": 2}, "has no option 'period'"),
        ("model-averaging", {"period": 0}, "'period' must be an integer"),
        ("parameter-server", {"servers": 2}, "'servers' must be an integer in 1..1"),
        ("dpsgd", {"compression": "sign"}, "does not support compression"),
    ],
)
def test_bad_options_are_usage_errors(name: str, options: Any, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        schemes.make_distributed(name, sgd(), SingleProcessCommunicator(), **options)


@pytest.mark.parametrize("name", NAMES)
def test_entry_point_and_single_rank_equals_local_step(name: str) -> None:
    cls = get_plugin_manager().load("d5.optimizers", name)
    assert issubclass(cls, DistributedOptimizer) and cls.name == name
    comm = SingleProcessCommunicator()
    opt = cls(sgd(0.5), comm)
    opt.lr = 0.1
    assert opt.lr == opt.local.lr == 0.1
    params = {"w": np.ones((2, 3)), "b": np.zeros(3)}
    grads = {"w": np.full((2, 3), 2.0), "b": np.arange(3.0)}
    opt.step(params, grads)
    np.testing.assert_allclose(params["w"], 1 - 0.1 * 2.0)
    np.testing.assert_allclose(params["b"], -0.1 * np.arange(3.0))
    assert opt.expected_bytes({"w": 6, "b": 3}, 10) == (0, 0)
    assert comm.counters()["bytes_sent"] == 0


def test_compressed_allreduce_single_rank_applies_decompressed_gradient() -> None:
    topk = {"name": "topk", "ratio": 0.5}
    comm = SingleProcessCommunicator()
    opt = schemes.make_distributed("allreduce", sgd(1.0), comm, compression=topk)
    params = {"w": np.zeros(4)}
    opt.step(params, {"w": np.array([1.0, -4.0, 0.5, 3.0])})
    np.testing.assert_array_equal(params["w"], [0.0, 4.0, 0.0, -3.0])
    opt.step(params, {"w": np.zeros(4)})  # error feedback sends the rest
    np.testing.assert_array_equal(params["w"], [-1.0, 4.0, -0.5, -3.0])
