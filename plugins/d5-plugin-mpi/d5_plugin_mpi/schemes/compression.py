"""Gradient compressors: top-k sparsification, QSGD quantization and 1-bit sign.

Selected with ``compression={"name": ..., **options}`` on a distributed optimizer that
supports it (``allreduce``). Each rank compresses its gradient per parameter, every
rank's payload is allgathered, and each rank decompresses and averages all of them, so
parameters stay identical on every rank.

- ``topk`` (``ratio``, default 0.01): keeps the ``k = max(1, ceil(ratio * n))``
  entries of largest magnitude (indices int32, or int64 past 2**31 elements, plus values);
  error feedback keeps the rest for the next step.
- ``qsgd`` (``bits``, default 8, 2..16; ``seed``): unbiased stochastic quantization of
  ``g / ||g||_2`` to ``s = 2**(bits-1) - 1`` signed levels (int8 up to 8 bits, else
  int16), sent with the norm; no error feedback by default.
- ``sign``: one bit per entry (packed) and the scale ``mean(|g|)``; error feedback on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from d5core.api import Compressor, UsageError

__all__ = ["COMPRESSORS", "QSGD", "Sign", "TopK", "make_compressor"]


def _index_dtype(size: int) -> type[np.signedinteger[Any]]:
    return np.int32 if size < 2**31 else np.int64


class TopK(Compressor):
    """Top-k sparsification with error feedback: payload ``(indices, values)``."""

    name: ClassVar[str] = "topk"

    def __init__(self, *, ratio: float = 0.01, error_feedback: bool = True, seed: int = 0) -> None:
        super().__init__(error_feedback=error_feedback, seed=seed)
        if not isinstance(ratio, int | float) or not 0 < ratio <= 1:
            raise UsageError(f"compression 'topk': ratio must be in (0, 1], not {ratio!r}")
        self.ratio = float(ratio)

    def k(self, size: int) -> int:
        """How many entries a gradient of ``size`` elements keeps."""
        return min(size, max(1, math.ceil(self.ratio * size)))

    def compress(self, name: str, grad: np.ndarray) -> tuple[np.ndarray, ...]:
        acc = self.accumulate(name, grad).reshape(-1)
        k = self.k(acc.size)
        idx = np.sort(np.argpartition(np.abs(acc), acc.size - k)[acc.size - k :])
        values = acc[idx].copy()
        sent = np.zeros_like(acc)
        sent[idx] = values
        self.remember(name, acc.reshape(np.shape(grad)), sent.reshape(np.shape(grad)))
        return idx.astype(_index_dtype(acc.size)), values

    def decompress(
        self, payload: Sequence[np.ndarray], shape: tuple[int, ...], dtype: np.dtype[Any]
    ) -> np.ndarray:
        idx, values = payload
        out = np.zeros(int(np.prod(shape, dtype=np.int64)), dtype=dtype)
        np.add.at(out, idx.astype(np.int64), values.astype(dtype))
        return out.reshape(shape)

    def payload_nbytes(self, size: int, itemsize: int) -> list[int]:
        k = self.k(size)
        return [k * np.dtype(_index_dtype(size)).itemsize, k * itemsize]


class QSGD(Compressor):
    """QSGD stochastic quantization (unbiased): payload ``(norm, levels)``."""

    name: ClassVar[str] = "qsgd"

    def __init__(self, *, bits: int = 8, error_feedback: bool = False, seed: int = 0) -> None:
        super().__init__(error_feedback=error_feedback, seed=seed)
        if not isinstance(bits, int) or isinstance(bits, bool) or not 2 <= bits <= 16:
            raise UsageError(f"compression 'qsgd': bits must be an integer in 2..16, not {bits!r}")
        self.bits = bits
        #: Quantization levels per sign.
        self.levels = 2 ** (bits - 1) - 1
        self.level_dtype = np.dtype(np.int8 if bits <= 8 else np.int16)
        self._rng: np.random.Generator | None = None

    @property
    def rng(self) -> np.random.Generator:
        """The compressor's generator, seeded from ``(seed, rank)`` on first use."""
        if self._rng is None:
            self._rng = np.random.default_rng([self.seed, self.rank])
        return self._rng

    def compress(self, name: str, grad: np.ndarray) -> tuple[np.ndarray, ...]:
        acc = self.accumulate(name, grad)
        flat = acc.reshape(-1).astype(np.float64)
        norm = float(np.linalg.norm(flat))
        if norm == 0.0 or not math.isfinite(norm):
            q = np.zeros(flat.size, dtype=self.level_dtype)
        else:
            r = np.abs(flat) / norm * self.levels
            low = np.floor(r)
            up = self.rng.random(flat.size) < (r - low)
            q = (np.sign(flat) * (low + up)).astype(self.level_dtype)
        norm_arr = np.array([norm], dtype=acc.dtype)
        if self.error_feedback:
            sent = self.decompress((norm_arr, q), np.shape(acc), acc.dtype)
            self.remember(name, acc, sent)
        return norm_arr, q

    def decompress(
        self, payload: Sequence[np.ndarray], shape: tuple[int, ...], dtype: np.dtype[Any]
    ) -> np.ndarray:
        norm, q = payload
        out: np.ndarray = q.astype(np.float64) * (float(norm[0]) / self.levels)
        return out.astype(dtype).reshape(shape)

    def payload_nbytes(self, size: int, itemsize: int) -> list[int]:
        return [itemsize, size * self.level_dtype.itemsize]


class Sign(Compressor):
    """1-bit sign compression with error feedback: payload ``(packed signs, scale)``."""

    name: ClassVar[str] = "sign"

    def __init__(self, *, error_feedback: bool = True, seed: int = 0) -> None:
        super().__init__(error_feedback=error_feedback, seed=seed)

    def compress(self, name: str, grad: np.ndarray) -> tuple[np.ndarray, ...]:
        acc = self.accumulate(name, grad)
        flat = acc.reshape(-1)
        scale = np.array([np.mean(np.abs(flat)) if flat.size else 0.0], dtype=acc.dtype)
        bits = np.packbits(flat >= 0)
        if self.error_feedback:
            self.remember(name, acc, self.decompress((bits, scale), np.shape(acc), acc.dtype))
        return bits, scale

    def decompress(
        self, payload: Sequence[np.ndarray], shape: tuple[int, ...], dtype: np.dtype[Any]
    ) -> np.ndarray:
        bits, scale = payload
        size = int(np.prod(shape, dtype=np.int64))
        signs: np.ndarray = np.unpackbits(bits, count=size).astype(dtype) * 2 - 1
        out: np.ndarray = signs * scale.astype(dtype)[0]
        return out.reshape(shape)

    def payload_nbytes(self, size: int, itemsize: int) -> list[int]:
        return [-(-size // 8), itemsize]


#: The compressors by name.
COMPRESSORS: dict[str, type[Compressor]] = {"topk": TopK, "qsgd": QSGD, "sign": Sign}


def make_compressor(spec: Compressor | Mapping[str, Any] | str | None) -> Compressor | None:
    """A compressor from ``{"name": ..., **options}``, a bare name, an instance or ``None``."""
    if spec is None or isinstance(spec, Compressor):
        return spec
    if isinstance(spec, str):
        spec = {"name": spec}
    if not isinstance(spec, Mapping) or "name" not in spec:
        raise UsageError(f"compression must be a name or a mapping with 'name', not {spec!r}")
    options = {k: v for k, v in spec.items() if k != "name"}
    cls = COMPRESSORS.get(str(spec["name"]))
    if cls is None:
        known = ", ".join(COMPRESSORS)
        raise UsageError(f"unknown compression {spec['name']!r}; known: {known}")
    try:
        return cls(**options)
    except TypeError:
        raise UsageError(
            f"compression {spec['name']!r}: unknown option among {', '.join(options)}"
        ) from None
