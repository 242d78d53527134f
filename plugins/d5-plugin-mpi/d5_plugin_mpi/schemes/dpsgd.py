"""``dpsgd``: decentralized parallel SGD (D-PSGD) over a ring.

After the local step, every rank exchanges its flattened parameters with its ring
neighbours (``comm.ring_neighbors()``, repeats counted once) and replaces them by the
uniform average of its own and theirs. The mixing matrix is doubly stochastic, so ranks
approach consensus (on 2 ranks they agree after every step) without any global
collective.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np

from d5_plugin_mpi.schemes._common import Scheme

__all__ = ["DPSGDOptimizer"]


class DPSGDOptimizer(Scheme):
    """Local step, then gossip-average parameters with the ring neighbours."""

    name: ClassVar[str] = "dpsgd"

    def neighbors(self) -> list[int]:
        """The distinct ring neighbours other than this rank."""
        me = self.comm.rank
        return [r for r in dict.fromkeys(self.comm.ring_neighbors()) if r != me]

    def scheme_step(
        self,
        params: Mapping[str, np.ndarray],
        grads: Mapping[str, np.ndarray],
        names: Sequence[str],
    ) -> None:
        if not names:
            return
        self.local.step({k: params[k] for k in names}, {k: grads[k] for k in names})
        nbrs = self.neighbors()
        if not nbrs:
            return
        flat = self.flatten(params, names)
        got = self.comm.neighbor_exchange(flat, nbrs)
        mixed = flat.copy()
        for r in nbrs:
            mixed += got[r]
        self.write_back(params, mixed / (len(nbrs) + 1), names)

    def expected_bytes(
        self, param_sizes: Mapping[str, int], steps: int, *, itemsize: int | None = None
    ) -> tuple[int, int]:
        flat = sum(int(s) for s in param_sizes.values()) * self.item(itemsize)
        moved = len(self.neighbors()) * flat * steps
        return moved, moved
