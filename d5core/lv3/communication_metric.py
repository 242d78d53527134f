"""Communication volume: bytes each rank sends and receives, as counted by the comm layer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from d5core.bus import COMM_CALL
from d5core.levels.metrics import Metric, MetricResult
from d5core.metrics._common import completion_events, finish, payload_of

__all__ = ["CommunicationVolume"]


def _new_tally() -> dict[str, int]:
    return {"calls": 0, "bytes_sent": 0, "bytes_received": 0}


def _add(into: dict[str, int], other: Mapping[str, Any]) -> None:
    for key in ("calls", "bytes_sent", "bytes_received"):
        into[key] += int(other.get(key, 0))


class CommunicationVolume(Metric):
    """Bytes sent and received per rank, summed from ``comm.call`` events, with a per-op
    breakdown.

    Each instant ``comm.call`` or span end ``comm.call.end`` counts once; its payload
    gives ``bytes_sent`` and ``bytes_received``, and optionally ``rank`` (else the
    metric's ``rank``) and ``op`` (the collective's name, else ``"unknown"``).
    ``value`` is bytes sent plus received by all ranks seen.

    :param rank: the rank assumed for events whose payload names none.
    """

    name: ClassVar[str] = "communication_volume"
    unit: ClassVar[str] = "B"
    better: ClassVar[str] = "lower"

    def __init__(self, *, rank: int = 0) -> None:
        self.rank = rank
        self.per_rank: dict[str, dict[str, int]] = {}
        self.per_op: dict[str, dict[str, int]] = {}
        self.malformed = 0

    def attach(self, bus: Any) -> None:
        for event in completion_events(COMM_CALL):
            self.listen(bus, event, self._on_call)

    def _on_call(self, event: Any) -> None:
        payload = payload_of(event)
        try:
            sent = int(payload.get("bytes_sent", 0))
            received = int(payload.get("bytes_received", 0))
        except (TypeError, ValueError):
            self.malformed += 1
            return
        if sent < 0 or received < 0:
            self.malformed += 1
            return
        one = {"calls": 1, "bytes_sent": sent, "bytes_received": received}
        rank = str(payload.get("rank", self.rank))
        op = str(payload.get("op") or "unknown")
        _add(self.per_rank.setdefault(rank, _new_tally()), one)
        _add(self.per_op.setdefault(op, _new_tally()), one)

    def result(self) -> MetricResult:
        if not self.per_rank:
            why = (
                f"{self.malformed} comm.call events had malformed byte counts"
                if self.malformed
                else "no comm.call event was published"
            )
            return finish(self, self.unavailable(why))
        return finish(self, self._totals(self.per_rank, self.per_op, self.malformed))

    @classmethod
    def _totals(
        cls,
        per_rank: Mapping[str, Mapping[str, int]],
        per_op: Mapping[str, Mapping[str, int]],
        malformed: int,
    ) -> MetricResult:
        total = _new_tally()
        for tally in per_rank.values():
            _add(total, tally)
        out: MetricResult = {
            "value": total["bytes_sent"] + total["bytes_received"],
            "unit": cls.unit,
            **total,
            "per_rank": {k: dict(v) for k, v in sorted(per_rank.items())},
            "per_op": {k: dict(v) for k, v in sorted(per_op.items())},
        }
        if malformed:
            out["malformed_events"] = malformed
        return out

    @classmethod
    def combine(cls, results: Sequence[Mapping[str, Any]]) -> MetricResult:
        """Merge the results of the ranks of one run (each from its own process's bus)."""
        per_rank: dict[str, dict[str, int]] = {}
        per_op: dict[str, dict[str, int]] = {}
        malformed = 0
        for r in results:
            for rank, tally in dict(r.get("per_rank", {})).items():
                _add(per_rank.setdefault(str(rank), _new_tally()), tally)
            for op, tally in dict(r.get("per_op", {})).items():
                _add(per_op.setdefault(str(op), _new_tally()), tally)
            malformed += int(r.get("malformed_events", 0))
        if not per_rank:
            return {"unavailable": "no rank reported communication", "unit": cls.unit}
        return cls._totals(per_rank, per_op, malformed)
