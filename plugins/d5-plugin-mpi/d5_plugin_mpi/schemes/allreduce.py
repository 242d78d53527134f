"""``allreduce``: consistent decentralized data parallelism.

Each step averages the gradients of all ranks with one allreduce of the flattened
gradient vector (sorted parameter names), then takes the local step; parameters stay
identical on every rank. With ``compression``, each rank compresses each parameter's
gradient, the payloads are allgathered, and every rank averages the decompressed
gradients of all ranks (in rank order, so again identically).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np

from d5_plugin_mpi.schemes._common import Scheme, add_bytes

__all__ = ["AllreduceOptimizer"]


class AllreduceOptimizer(Scheme):
    """Average gradients with one allreduce (or compressed allgathers), then step locally."""

    name: ClassVar[str] = "allreduce"
    supports_compression: ClassVar[bool] = True

    def scheme_step(
        self,
        params: Mapping[str, np.ndarray],
        grads: Mapping[str, np.ndarray],
        names: Sequence[str],
    ) -> None:
        if not names:
            return
        n = self.comm.size
        if self.compression is None:
            flat = self.flat_grads(params, grads, names)
            total = self.comm.allreduce(flat) if n > 1 else flat
            avg = self.unflatten(total / n, params, names)
        else:
            avg = {}
            for key in names:
                p = params[key]
                g = np.asarray(grads[key], dtype=p.dtype)
                payload = self.compression.compress(key, g)
                gathered = [self.comm.allgather(part) for part in payload]
                acc = np.zeros(p.shape, dtype=p.dtype)
                for r in range(n):
                    acc += self.compression.decompress(
                        [parts[r] for parts in gathered], p.shape, p.dtype
                    )
                avg[key] = acc / n
        self.local.step({k: params[k] for k in names}, avg)

    def expected_bytes(
        self, param_sizes: Mapping[str, int], steps: int, *, itemsize: int | None = None
    ) -> tuple[int, int]:
        item = self.item(itemsize)
        total = [0, 0]
        if self.compression is None:
            flat = sum(int(s) for s in param_sizes.values()) * item
            add_bytes(total, self.collective("allreduce", flat), steps)
        else:
            for size in param_sizes.values():
                for nbytes in self.compression.payload_nbytes(int(size), item):
                    add_bytes(total, self.collective("allgather", nbytes), steps)
        return total[0], total[1]
