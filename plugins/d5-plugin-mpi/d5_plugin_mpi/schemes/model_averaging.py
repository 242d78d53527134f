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
from d5core.api import Communicator, Compressor, Optimizer

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
