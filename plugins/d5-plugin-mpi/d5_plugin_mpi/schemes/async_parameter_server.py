"""``async-parameter-server``: an inconsistent parameter server on rank 0.

Rank 0 is the server (and a worker too). Each step it applies its own gradient, then
receives the gradient of every other rank in the order they arrive (``ANY_SOURCE``; a
gradient of a worker already one step ahead waits for the next step), applies each at
once as its own local step scaled by ``1/size``, and answers that worker with the
parameters as they are right then. A worker sends its gradient, receives those
parameters and goes on.

Staleness: a worker's parameters include the updates applied before its own gradient
arrived, but not those of the workers answered after it in the same step, so its next
gradient is computed on parameters up to ``size - 1`` updates stale; which updates those
are depends on arrival order, so runs are not reproducible and ranks hold different
parameters (:meth:`synchronize` copies the server's to all). Every worker's gradient is
applied exactly once per step, and workers are at most one step apart. For SGD the
server's parameters after a step are ``p - lr/size * sum(gradients)`` whatever the order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from d5_plugin_mpi.schemes._common import Scheme
from d5_plugin_mpi.schemes._cost import check_model_options, one_rank, param_sizes
from d5core.api import ANY_SOURCE, CommCost, Communicator, Compressor, Optimizer

__all__ = ["AsyncParameterServerOptimizer"]

_GRAD_TAG = 0x5D53
_PARAM_TAG = 0x5D56


class AsyncParameterServerOptimizer(Scheme):
    """Rank 0 applies each rank's gradient as it arrives; workers pull fresh-ish params."""

    name: ClassVar[str] = "async-parameter-server"

    def __init__(
        self,
        local: Optimizer,
        comm: Communicator,
        *,
        compression: Compressor | Mapping[str, Any] | str | None = None,
        **options: Any,
    ) -> None:
        super().__init__(local, comm, compression=compression, **options)
        #: Ranks whose gradients the server applied, in order, per step (server only).
        self.arrivals: list[list[int]] = []

    def scheme_step(
        self,
        params: Mapping[str, np.ndarray],
        grads: Mapping[str, np.ndarray],
        names: Sequence[str],
    ) -> None:
        if not names:
            return
        comm, n = self.comm, self.comm.size
        flat_g = self.flat_grads(params, grads, names)
        # A worker runs at most one step ahead of the server (it waits for its reply), so
        # the step's parity in the tag keeps its next gradient out of this step.
        tag = _GRAD_TAG + self.t % 2
        if comm.rank == 0:
            mine = {k: params[k] for k in names}
            self.local.step(mine, self.unflatten(flat_g / n, params, names))
            order = [0]
            for _ in range(n - 1):
                g, src = comm.recv_from(flat_g.size, flat_g.dtype, ANY_SOURCE, tag=tag)
                self.local.step(mine, self.unflatten(g / n, params, names))
                comm.send(self.flatten(params, names), dest=src, tag=_PARAM_TAG)
                order.append(src)
            self.arrivals.append(order)
        else:
            comm.send(flat_g, dest=0, tag=tag)
            flat_p = comm.recv(flat_g.size, flat_g.dtype, source=0, tag=_PARAM_TAG)
            self.write_back(params, flat_p, names)

    def synchronize(self, params: Mapping[str, np.ndarray]) -> None:
        """Copy the server's parameters to every rank (a broadcast from rank 0)."""
        names = sorted(params)
        if names and self.comm.size > 1:
            self.write_back(params, self.comm.broadcast(self.flatten(params, names)), names)

    def expected_bytes(
        self, param_sizes: Mapping[str, int], steps: int, *, itemsize: int | None = None
    ) -> tuple[int, int]:
        flat = sum(int(s) for s in param_sizes.values()) * self.item(itemsize)
        per_step = (self.comm.size - 1) * flat if self.comm.rank == 0 else flat
        return per_step * steps, per_step * steps

    @classmethod
    def communication_cost(
        cls,
        *,
        ranks: int,
        params: int | Mapping[str, int],
        itemsize: int,
        latency_s: float,
        seconds_per_byte: float,
        options: Mapping[str, Any],
        exchange_s_per_byte: float | None = None,
        reduce_s_per_byte: float = 0.0,
    ) -> CommCost:
        """The server's step: for each of the ``P-1`` workers in turn, receive its
        ``B``-byte gradient, then send it the parameters: ``2 (P-1) (L + B G)``."""
        check_model_options(cls.name, options, cls.option_defaults, False)
        if ranks <= 1:
            return one_rank()
        nbytes = sum(param_sizes(params)) * itemsize
        workers = max(0, ranks - 1)
        return CommCost.of(
            messages=2 * workers, critical_bytes=2 * workers * nbytes,
            bytes_sent=workers * nbytes, latency_s=latency_s,
            seconds_per_byte=seconds_per_byte, algorithm="server on rank 0, one worker at a time",
            formula="2 (P-1) (L + B G)",
        )  # fmt: skip
