"""``model-averaging``: local steps, parameters averaged every ``period`` steps.

Every rank takes local steps on its own gradients; after every ``period``-th step
(option ``period``, default 1) the flattened parameters are averaged with one allreduce.
Ranks drift apart between averagings and agree right after. With ``period=1`` and SGD
this equals the ``allreduce`` scheme.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from d5_plugin_mpi.schemes._common import Scheme, add_bytes, positive_int
from d5_plugin_mpi.schemes._cost import (
    allreduce_rounds,
    check_model_options,
    one_rank,
    param_sizes,
)
from d5core.api import CommCost, Communicator, Compressor, Optimizer, collective_bytes

__all__ = ["ModelAveragingOptimizer"]


class ModelAveragingOptimizer(Scheme):
    """Local SGD with periodic parameter averaging."""

    name: ClassVar[str] = "model-averaging"
    option_defaults: ClassVar[Mapping[str, int | float | str | None]] = {"period": 1}

    def __init__(
        self,
        local: Optimizer,
        comm: Communicator,
        *,
        compression: Compressor | Mapping[str, Any] | str | None = None,
        **options: Any,
    ) -> None:
        super().__init__(local, comm, compression=compression, **options)
        #: Steps between averagings.
        self.period = positive_int(self.name, "period", self.options["period"])

    def scheme_step(
        self,
        params: Mapping[str, np.ndarray],
        grads: Mapping[str, np.ndarray],
        names: Sequence[str],
    ) -> None:
        if not names:
            return
        self.local.step({k: params[k] for k in names}, {k: grads[k] for k in names})
        if self.t % self.period == 0 and self.comm.size > 1:
            flat = self.comm.allreduce(self.flatten(params, names))
            self.write_back(params, flat / self.comm.size, names)

    def expected_bytes(
        self, param_sizes: Mapping[str, int], steps: int, *, itemsize: int | None = None
    ) -> tuple[int, int]:
        flat = sum(int(s) for s in param_sizes.values()) * self.item(itemsize)
        total = [0, 0]
        add_bytes(total, self.collective("allreduce", flat), steps // self.period)
        return total[0], total[1]

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
        """One allreduce of the ``B``-byte parameters every ``k`` = ``period`` steps, as
        MPICH runs it, averaged per step: ``(2 L log2 P + 2 B Gx (P-1)/P + B R (P-1)/P)
        / k``."""
        opts = check_model_options(cls.name, options, cls.option_defaults, False)
        period = positive_int(cls.name, "period", opts["period"])
        if ranks <= 1:
            return one_rank()
        count = sum(param_sizes(params))
        nbytes = count * itemsize
        r = allreduce_rounds(nbytes, count, ranks)
        inner = (
            "(L + B Gx + B R) log2 P" if r.algorithm == "recursive doubling"
            else "2 L log2 P + 2 B Gx (P-1)/P + B R (P-1)/P"
        )  # fmt: skip
        return CommCost.of(
            messages=r.messages / period, critical_bytes=r.nbytes / period,
            bytes_sent=collective_bytes("allreduce", nbytes, ranks, 0)[0] / period,
            latency_s=latency_s,
            seconds_per_byte=seconds_per_byte if exchange_s_per_byte is None
            else exchange_s_per_byte,
            algorithm=f"{r.algorithm} every {period} step{'s' if period > 1 else ''}",
            formula=f"({inner}) / k" + (" (+ 2 (L + B Gx) + B R for P not a power of 2)"
                                        if ranks & (ranks - 1) else ""),
            reduced_bytes=r.reduced / period, reduce_s_per_byte=reduce_s_per_byte,
        )  # fmt: skip
