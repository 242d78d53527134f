"""The latency-bandwidth cost of the MPI calls the schemes make, as MPICH runs them.

A message of ``m`` bytes costs ``L + G*m``. A collective's cost is that of the rounds on
its critical path: each round one message per rank, sent and received at once, so its
bytes cost ``Gx`` each, the time per byte of two ranks sending to each other at once
(``G`` on a full-duplex link, more where both directions share one resource); the bytes
an allreduce adds up cost ``R`` each. The algorithms are those of
MPICH's default selection (``maint/tuning/coll/mpir/generic.json``; Thakur, Rabenseifner
and Gropp, "Optimization of collective communication operations in MPICH", 2005):

- ``MPI_Allreduce``: recursive doubling when the buffer is at most 8 bytes or has fewer
  elements than ``p2``, the largest power of two not above ``P``; otherwise
  Rabenseifner's algorithm, a reduce-scatter by recursive halving and an allgather by
  recursive doubling. When ``P`` is not a power of two, ``P - p2`` ranks first hand
  their whole buffer to a partner and get the result back at the end (two more rounds
  of ``B`` bytes). Rabenseifner's reduce-scatter adds up ``B (p2-1)/p2`` bytes on the
  critical path, recursive doubling ``B`` a round, a partner's fold ``B``.
- ``MPI_Allgather``: with ``P`` a power of two, recursive doubling below 512 KiB of
  gathered result, the ring above; otherwise Bruck's algorithm below 80 KiB, the ring
  above. Every one moves ``(P-1) b`` bytes into each rank; they differ in rounds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

from d5core.api import CommCost, UsageError

__all__ = [
    "ALLGATHER_RING_FROM_OTHER",
    "ALLGATHER_RING_FROM_POW2",
    "HEADER_NBYTES",
    "Rounds",
    "allgather_rounds",
    "allreduce_rounds",
    "check_model_options",
    "one_rank",
    "param_sizes",
    "pow2_below",
]

#: The shape header :class:`~d5_plugin_mpi.comm.MPICommunicator` allgathers before each
#: allgather's data (its ``SHAPE_HEADER_NBYTES``; kept here so that modelling a scheme
#: does not import mpi4py, which starts MPI).
HEADER_NBYTES = 128
#: Gathered bytes from which MPICH's allgather takes the ring, ``P`` a power of two.
ALLGATHER_RING_FROM_POW2 = 524288
#: Gathered bytes from which MPICH's allgather takes the ring, other ``P``.
ALLGATHER_RING_FROM_OTHER = 81920


class Rounds(NamedTuple):
    """Rounds (latency terms), bytes moved and bytes reduced on the critical path of one
    call."""

    messages: float
    nbytes: float
    algorithm: str
    reduced: float = 0.0


def pow2_below(ranks: int) -> int:
    """The largest power of two not above ``ranks``."""
    return 1 << (int(ranks).bit_length() - 1)


def allreduce_rounds(nbytes: int, count: int, ranks: int) -> Rounds:
    """MPICH's allreduce of ``count`` elements (``nbytes`` bytes) on ``ranks`` ranks."""
    if ranks <= 1 or nbytes <= 0:
        return Rounds(0, 0, "none")
    p2 = pow2_below(ranks)
    steps = p2.bit_length() - 1  # log2 p2
    extra = 2 if ranks > p2 else 0  # hand the buffer to a partner and back
    fold = nbytes if extra else 0  # the partner adds the buffer it was handed
    if nbytes <= 8 or count < p2:
        return Rounds(steps + extra, (steps + extra) * nbytes, "recursive doubling",
                      steps * nbytes + fold)  # fmt: skip
    halves = 2 * (p2 - 1) * nbytes / p2  # reduce-scatter + allgather, each (p2-1)/p2 B
    return Rounds(2 * steps + extra, halves + extra * nbytes, "Rabenseifner",
                  (p2 - 1) * nbytes / p2 + fold)  # fmt: skip


def allgather_rounds(piece: int, ranks: int) -> Rounds:
    """MPICH's allgather of a ``piece``-byte buffer from each of ``ranks`` ranks."""
    if ranks <= 1:
        return Rounds(0, 0, "none")
    gathered = ranks * piece
    moved = (ranks - 1) * piece
    if ranks == pow2_below(ranks):
        if gathered < ALLGATHER_RING_FROM_POW2:
            return Rounds(ranks.bit_length() - 1, moved, "recursive doubling")
    elif gathered < ALLGATHER_RING_FROM_OTHER:
        return Rounds(math.ceil(math.log2(ranks)), moved, "Bruck")
    return Rounds(ranks - 1, moved, "ring")


def param_sizes(params: int | Mapping[str, int]) -> list[int]:
    """The element count of each parameter (one flat parameter for an int).

    :raises UsageError: for a count below 1.
    """
    sizes = [int(params)] if isinstance(params, int) else [int(v) for v in params.values()]
    if not sizes or min(sizes) < 1:
        raise UsageError(f"params must be a positive count of parameters, not {params!r}")
    return sizes


def check_model_options(
    scheme: str, options: Mapping[str, Any], known: Mapping[str, Any], compression: bool
) -> dict[str, Any]:
    """``options`` with the defaults of ``known`` filled in.

    :raises UsageError: for an option the scheme does not take.
    """
    allowed = [*known, *(["compression"] if compression else [])]
    for key in options:
        if key not in allowed:
            if key == "compression":
                raise UsageError(f"{scheme!r} does not support compression")
            raise UsageError(
                f"{scheme!r} has no option {key!r}; its options: {', '.join(allowed) or 'none'}"
            )
    return {**known, **options}


def one_rank() -> CommCost:
    """The cost of a step on one rank: nothing is sent."""
    return CommCost.of(messages=0, critical_bytes=0, bytes_sent=0, latency_s=0.0,
                       seconds_per_byte=0.0, algorithm="none (one rank)", formula="0")  # fmt: skip
