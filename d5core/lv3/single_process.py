"""The communicator of a job of one rank: what d5 uses when a run is not distributed,
and the base of the launcher's stand-in for ranks it has planned but not started."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from d5core.levels.distributed import ANY_SOURCE, REDUCE_OPS, Communicator

__all__ = ["SingleProcessCommunicator"]

_clock = time.perf_counter_ns


def _check_op(op: str) -> None:
    if op not in REDUCE_OPS:
        raise ValueError(f"unknown reduction {op!r}; expected one of {', '.join(REDUCE_OPS)}")


class SingleProcessCommunicator(Communicator):
    """A job of one rank: every collective returns a copy of its input; counts zero bytes."""

    name = "single"

    @property
    def rank(self) -> int:
        return 0

    @property
    def size(self) -> int:
        return 1

    def _copy(self, op: str, array: np.ndarray) -> np.ndarray:
        t0 = _clock()
        out = np.array(array, copy=True, order="C")
        self._record(op, 0, 0, t0)
        return out

    def allreduce(self, array: np.ndarray, op: str = "sum") -> np.ndarray:
        _check_op(op)
        return self._copy("allreduce", array)

    def allreduce_inplace(self, array: np.ndarray, op: str = "sum") -> None:
        _check_op(op)
        self._record("allreduce", 0, 0, _clock())

    def reduce(self, array: np.ndarray, root: int = 0, op: str = "sum") -> np.ndarray | None:
        _check_op(op)
        return self._copy("reduce", array)

    def broadcast(self, array: np.ndarray, root: int = 0) -> np.ndarray:
        return self._copy("broadcast", array)

    def gather(self, array: np.ndarray, root: int = 0) -> list[np.ndarray] | None:
        return [self._copy("gather", array)]

    def allgather(self, array: np.ndarray) -> list[np.ndarray]:
        return [self._copy("allgather", array)]

    def reduce_scatter(self, array: np.ndarray, op: str = "sum") -> np.ndarray:
        _check_op(op)
        return self._copy("reduce_scatter", array).reshape(-1)

    def neighbor_exchange(
        self, array: np.ndarray, neighbors: Sequence[int]
    ) -> dict[int, np.ndarray]:
        t0 = _clock()
        out = {int(n): np.array(array, copy=True, order="C") for n in neighbors}
        self._record("neighbor_exchange", 0, 0, t0)
        return out

    def barrier(self) -> None:
        self._record("barrier", 0, 0, _clock())

    def send(self, array: np.ndarray, dest: int, tag: int = 0) -> None:
        raise ValueError("a single-process communicator has no other rank to send to")

    def recv_from(
        self, shape: Sequence[int] | int, dtype: Any, source: int = ANY_SOURCE, tag: int = 0
    ) -> tuple[np.ndarray, int]:
        raise ValueError("a single-process communicator has no other rank to receive from")
