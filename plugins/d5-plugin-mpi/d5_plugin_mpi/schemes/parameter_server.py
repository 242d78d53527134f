"""``parameter-server``: a consistent parameter server sharded over server ranks.

Option ``servers`` (default: every rank) makes ranks ``0 .. servers-1`` the servers. The
flattened parameter vector (sorted names) is split into ``servers`` near-equal shards
(:func:`~d5core.api.chunk_counts`); server ``s`` owns shard ``s`` and its
slice of the local optimizer's state. Each step every rank pushes each shard of its
gradient to the shard's owner (point to point), each owner averages the ``size``
gradients and takes the local step on its shard, then sends the updated shard to every
other rank. Every rank ends with identical parameters, equal (for element-wise optimizers)
to the ``allreduce`` scheme. ``servers=1`` is the classic single parameter server on
rank 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from d5_plugin_mpi.schemes._common import Scheme, positive_int
from d5_plugin_mpi.schemes._cost import check_model_options, one_rank, param_sizes
from d5core.api import CommCost, Communicator, Compressor, Optimizer, chunk_counts

__all__ = ["ParameterServerOptimizer"]

_PUSH_TAG = 0x5D51
_PULL_TAG = 0x5D52


class ParameterServerOptimizer(Scheme):
    """Push gradient shards to their owners; owners average, update and send back."""

    name: ClassVar[str] = "parameter-server"
    option_defaults: ClassVar[Mapping[str, int | float | str | None]] = {"servers": None}

    def __init__(
        self,
        local: Optimizer,
        comm: Communicator,
        *,
        compression: Compressor | Mapping[str, Any] | str | None = None,
        **options: Any,
    ) -> None:
        super().__init__(local, comm, compression=compression, **options)
        servers = self.options["servers"]
        size = self.comm.size
        #: Number of server ranks (ranks ``0 .. servers-1``).
        self.servers = (
            size if servers is None else positive_int(self.name, "servers", servers, upper=size)
        )

    def bounds(self, length: int) -> list[tuple[int, int]]:
        """``(start, stop)`` of each server's shard of a flat vector of ``length``."""
        out, start = [], 0
        for count in chunk_counts(length, self.servers):
            out.append((start, start + count))
            start += count
        return out

    def scheme_step(
        self,
        params: Mapping[str, np.ndarray],
        grads: Mapping[str, np.ndarray],
        names: Sequence[str],
    ) -> None:
        if not names:
            return
        comm, me, n = self.comm, self.comm.rank, self.comm.size
        flat_g = self.flat_grads(params, grads, names)
        flat_p = self.flatten(params, names)
        bounds = self.bounds(flat_g.size)
        # Push: phase s, every other rank sends shard s to server s, in rank order.
        mine: np.ndarray | None = None
        for s, (a, b) in enumerate(bounds):
            if me == s:
                mine = flat_g[a:b].copy()
                for r in range(n):
                    if r != s:
                        mine += comm.recv(b - a, flat_g.dtype, source=r, tag=_PUSH_TAG)
            else:
                comm.send(flat_g[a:b], dest=s, tag=_PUSH_TAG)
        # Update: server ``me`` steps its shard with the averaged gradient.
        if mine is not None:
            a, b = bounds[me]
            mine /= n
            shard_p, shard_g = self._shard(flat_p, mine, a, b, params, names)
            self.local.step(shard_p, shard_g)
        # Pull: phase s, server s sends its updated shard to every other rank.
        for s, (a, b) in enumerate(bounds):
            if me == s:
                for r in range(n):
                    if r != s:
                        comm.send(flat_p[a:b], dest=r, tag=_PULL_TAG)
            else:
                flat_p[a:b] = comm.recv(b - a, flat_p.dtype, source=s, tag=_PULL_TAG)
        self.write_back(params, flat_p, names)

    @staticmethod
    def _shard(
        flat_p: np.ndarray,
        shard_g: np.ndarray,
        a: int,
        b: int,
        params: Mapping[str, np.ndarray],
        names: Sequence[str],
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Views of each parameter's part in ``[a, b)`` of ``flat_p`` and its gradient."""
        ps: dict[str, np.ndarray] = {}
        gs: dict[str, np.ndarray] = {}
        offset = 0
        for key in names:
            size = int(params[key].size)
            lo, hi = max(a, offset), min(b, offset + size)
            if lo < hi:
                ps[key] = flat_p[lo:hi]
                gs[key] = shard_g[lo - a : hi - a]
            offset += size
        return ps, gs

    def expected_bytes(
        self, param_sizes: Mapping[str, int], steps: int, *, itemsize: int | None = None
    ) -> tuple[int, int]:
        item = self.item(itemsize)
        me, n = self.comm.rank, self.comm.size
        length = sum(int(s) for s in param_sizes.values())
        sent = received = 0
        for s, (a, b) in enumerate(self.bounds(length)):
            nbytes = (b - a) * item
            if me == s:
                sent += (n - 1) * nbytes
                received += (n - 1) * nbytes
            else:
                sent += nbytes
                received += nbytes
        return sent * steps, received * steps

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
        """Push and pull as :meth:`scheme_step` orders them, shards of ``B/s`` bytes.

        Push: server ``j`` receives its ``P-1`` shards in rank order, and ranks below
        ``j`` send theirs only after their own server phase, so the ``s`` phases run one
        after another: ``s (P-1) (L + G B/s)``. Pull: server ``j`` starts sending once it
        has server ``j-1``'s shard, so the phases overlap: ``(P+s-2) (L + G B/s)``. (The
        ideal of a sharded server whose messages all overlap, ``2L + 2 P B G / s``, is
        what this would be if every server received and sent its shards at once.)
        """
        opts = check_model_options(cls.name, options, cls.option_defaults, False)
        given = opts["servers"]
        servers = ranks if given is None else positive_int(cls.name, "servers", given, upper=ranks)
        count = sum(param_sizes(params))
        counts = chunk_counts(count, servers)
        if ranks <= 1:
            return one_rank()
        shard = max(counts) * itemsize
        push_msgs, pull_msgs = servers * (ranks - 1), ranks + servers - 2
        push_bytes = sum(counts) * itemsize * (ranks - 1)
        sent = [(ranks - 1) * c * itemsize + (count - c) * itemsize for c in counts]
        if servers < ranks:
            sent.append(count * itemsize)
        return CommCost.of(
            messages=push_msgs + pull_msgs,
            critical_bytes=push_bytes + pull_msgs * shard,
            bytes_sent=max(sent), latency_s=latency_s, seconds_per_byte=seconds_per_byte,
            algorithm=f"{servers} server{'s' if servers > 1 else ''}, point to point",
            formula="s (P-1) (L + G B/s) + (P+s-2) (L + G B/s)",
        )  # fmt: skip
