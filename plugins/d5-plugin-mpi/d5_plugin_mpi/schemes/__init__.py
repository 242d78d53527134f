"""Distributed optimizers: communication schemes around a local optimizer.

Each scheme is a :class:`~d5core.api.DistributedOptimizer` and a
``d5.optimizers`` entry, built as ``cls(local, comm, *, compression=None, **options)``:

- ``allreduce``: average gradients with one allreduce, then step locally (consistent;
  takes ``compression``).
- ``parameter-server``: gradients pushed to shard owners (``servers``, default every
  rank), averaged and applied there, parameters sent back (consistent).
- ``async-parameter-server``: rank 0 applies each rank's gradient as it arrives; workers
  get possibly stale parameters (inconsistent).
- ``model-averaging``: local steps, parameters averaged every ``period`` steps.
- ``dpsgd``: local step, then average parameters with the ring neighbours.

Compressors (``compression={"name": "topk", "ratio": 0.01}``): ``topk``, ``qsgd``, ``sign``.
"""

from __future__ import annotations

from typing import Any

from d5_plugin_mpi.schemes._common import Scheme
from d5_plugin_mpi.schemes.allreduce import AllreduceOptimizer
from d5_plugin_mpi.schemes.async_parameter_server import AsyncParameterServerOptimizer
from d5_plugin_mpi.schemes.compression import COMPRESSORS, QSGD, Sign, TopK, make_compressor
from d5_plugin_mpi.schemes.dpsgd import DPSGDOptimizer
from d5_plugin_mpi.schemes.model_averaging import ModelAveragingOptimizer
from d5_plugin_mpi.schemes.parameter_server import ParameterServerOptimizer
from d5core.api import Communicator, DistributedOptimizer, Optimizer, UsageError

__all__ = [
    "COMPRESSORS",
    "QSGD",
    "SCHEMES",
    "AllreduceOptimizer",
    "AsyncParameterServerOptimizer",
    "DPSGDOptimizer",
    "ModelAveragingOptimizer",
    "ParameterServerOptimizer",
    "Scheme",
    "Sign",
    "TopK",
    "make_compressor",
    "make_distributed",
]

#: The schemes by their ``d5.optimizers`` name.
SCHEMES: dict[str, type[Scheme]] = {
    cls.name: cls
    for cls in (
        AllreduceOptimizer,
        ParameterServerOptimizer,
        AsyncParameterServerOptimizer,
        ModelAveragingOptimizer,
        DPSGDOptimizer,
    )
}


def make_distributed(
    name: str, local: Optimizer, comm: Communicator, **options: Any
) -> DistributedOptimizer:
    """The scheme ``name`` around ``local`` over ``comm``; ``options`` may hold
    ``compression`` (a compressor, a name or ``{"name": ..., **options}``)."""
    cls = SCHEMES.get(name)
    if cls is None:
        raise UsageError(f"unknown distributed optimizer {name!r}; known: {', '.join(SCHEMES)}")
    return cls(local, comm, **options)
