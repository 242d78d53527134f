"""``dpsgd``: decentralized parallel SGD (D-PSGD) over a ring.

After the local step, every rank exchanges its flattened parameters with its ring
neighbours (``comm.ring_neighbors()``, repeats counted once) and replaces them by the
uniform average of its own and theirs. The mixing matrix is doubly stochastic, so ranks
approach consensus (on 2 ranks they agree after every step) without any global
collective.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from d5_plugin_mpi.schemes._common import Scheme
from d5_plugin_mpi.schemes._cost import check_model_options, one_rank, param_sizes
from d5core.api import CommCost

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
        """The ``B``-byte parameters to and from each of the ``d`` distinct ring
        neighbours (1 on two ranks, else 2), sent both ways at once: ``d (L + B Gx)``,
        whatever ``P`` (the average happens outside the communication)."""
        check_model_options(cls.name, options, cls.option_defaults, False)
        if ranks <= 1:
            return one_rank()
        nbytes = sum(param_sizes(params)) * itemsize
        d = 1 if ranks == 2 else 2
        return CommCost.of(
            messages=d, critical_bytes=d * nbytes, bytes_sent=d * nbytes,
            latency_s=latency_s,
            seconds_per_byte=seconds_per_byte if exchange_s_per_byte is None
            else exchange_s_per_byte,
            algorithm="ring neighbour exchange", formula="d (L + B Gx), d = min(2, P-1)",
        )  # fmt: skip
