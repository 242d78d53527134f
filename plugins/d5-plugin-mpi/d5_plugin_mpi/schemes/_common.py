"""What the schemes share: construction from option specs, flattening, byte counting."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from d5_plugin_mpi.schemes.compression import make_compressor
from d5core.api import (
    Communicator,
    Compressor,
    DistributedOptimizer,
    Optimizer,
    UsageError,
    collective_bytes,
)

__all__ = ["Scheme", "add_bytes", "positive_int"]


def positive_int(scheme: str, key: str, value: Any, *, upper: int | None = None) -> int:
    """``value`` as an int in ``1..upper``, or a one-line :class:`UsageError`."""
    ok = isinstance(value, int | np.integer) and not isinstance(value, bool) and value >= 1
    if not ok or (upper is not None and int(value) > upper):
        bound = f"1..{upper}" if upper is not None else ">= 1"
        raise UsageError(f"{scheme!r}: option {key!r} must be an integer in {bound}, not {value!r}")
    return int(value)


def add_bytes(total: list[int], sent_received: tuple[int, int], times: int = 1) -> None:
    """Add ``times`` counts of ``(sent, received)`` into ``total``."""
    total[0] += sent_received[0] * times
    total[1] += sent_received[1] * times


class Scheme(DistributedOptimizer):
    """A :class:`DistributedOptimizer` whose ``compression`` may also be a spec mapping."""

    def __init__(
        self,
        local: Optimizer,
        comm: Communicator,
        *,
        compression: Compressor | Mapping[str, Any] | str | None = None,
        **options: Any,
    ) -> None:
        super().__init__(local, comm, compression=make_compressor(compression), **options)

    @staticmethod
    def flat_grads(
        params: Mapping[str, np.ndarray], grads: Mapping[str, np.ndarray], names: Sequence[str]
    ) -> np.ndarray:
        """The gradients ``names``, each in its parameter's dtype, flattened."""
        if not names:
            return np.zeros(0)
        return np.concatenate(
            [np.asarray(grads[n], dtype=params[n].dtype).reshape(-1) for n in names]
        )

    def write_back(
        self, params: Mapping[str, np.ndarray], flat: np.ndarray, names: Sequence[str]
    ) -> None:
        """Copy ``flat`` into ``params`` (in place), in the order of ``names``."""
        for n, view in self.unflatten(flat, params, names).items():
            params[n][...] = view

    def collective(self, op: str, nbytes: int, root: int = 0) -> tuple[int, int]:
        """The communicator's count of one collective ``op`` on ``nbytes`` bytes: the
        convention's, plus the shape header a ``gather``/``allgather`` exchanges first."""
        sent, received = collective_bytes(op, nbytes, self.comm.size, self.comm.rank, root)
        if op in ("gather", "allgather"):
            header = int(getattr(self.comm, "shape_header_nbytes", 0))
            h_sent, h_received = collective_bytes(op, header, self.comm.size, self.comm.rank, root)
            sent, received = sent + h_sent, received + h_received
        return sent, received

    def item(self, itemsize: int | None) -> int:
        """``itemsize``, else that of the last step's parameters, else 4."""
        if itemsize is not None:
            return int(itemsize)
        return self.itemsize if self.itemsize is not None else 4
