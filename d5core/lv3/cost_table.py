"""What ``d5 model comm`` computes: a scheme's predicted communication per step over a
range of rank counts, from the latency ``L`` and time per byte ``G`` of a ping-pong fit.

The model itself belongs to the scheme (``DistributedOptimizer.communication_cost``, a
:class:`~d5core.levels.distributed.CommCost` per rank count); this module reads the
command's arguments (rank lists, parameter counts, zoo model names), asks the scheme,
and lays the answers out as rows and as a figure.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from d5core.errors import UsageError

if TYPE_CHECKING:
    from d5core.levels.distributed import CommCost
    from d5core.lv3.comm_fit import CommFit

__all__ = [
    "MAX_RANKS",
    "CostRow",
    "ParamCount",
    "cost_rows",
    "draw_costs",
    "parse_params",
    "parse_rank_list",
    "scheme_with_model",
]

#: The most ranks ``--ranks`` may name (a list stops here).
MAX_RANKS = 1 << 24
_SUFFIX = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "b": 10**9, "t": 10**12}
_NUMBER = re.compile(r"^([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kmgbt]?)$", re.IGNORECASE)


@dataclass(frozen=True)
class ParamCount:
    """The parameters a prediction is for: their total, and per parameter when known."""

    #: The total number of parameter elements.
    total: int
    #: The element count of each parameter by name (a zoo model), else ``None``.
    sizes: Mapping[str, int] | None
    #: What ``--params`` named: the zoo model's name or the count as given.
    label: str

    def for_model(self) -> int | Mapping[str, int]:
        """What ``communication_cost`` takes as ``params``."""
        return self.sizes if self.sizes is not None else self.total


@dataclass(frozen=True)
class CostRow:
    """One rank count's prediction."""

    ranks: int
    cost: CommCost

    def to_json(self) -> dict[str, Any]:
        """The row as a JSON-ready dict (seconds per step, its parts, bytes, algorithm)."""
        c = self.cost
        return {"ranks": self.ranks, "seconds": c.seconds, "latency_seconds": c.latency_seconds,
                "bandwidth_seconds": c.bandwidth_seconds,
                "reduce_seconds": c.reduce_seconds, "messages": c.messages,
                "critical_bytes": c.critical_bytes, "reduced_bytes": c.reduced_bytes,
                "bytes_sent": c.bytes_sent,
                "bound": c.bound, "algorithm": c.algorithm, "formula": c.formula}  # fmt: skip


def _rank_count(text: str, whole: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise UsageError(
            f"--ranks {whole}: {text.strip()!r} is not a whole number; give counts such as "
            "4, 2,4,8 or 2,4,...,4096"
        ) from None
    if value <= 0:
        raise UsageError(f"--ranks {whole}: rank counts must be 1 or more, not {value}")
    if value > MAX_RANKS:
        raise UsageError(f"--ranks {whole}: at most {MAX_RANKS} ranks, not {value}")
    return value


def parse_rank_list(text: str) -> list[int]:
    """``"4"``, ``"2,4,8"`` or ``"2,4,...,4096"`` (each count the one before times the
    ratio of the first two, up to the last) as a list of rank counts.

    :raises UsageError: one line, for a count that is not a whole number above 0, or a
        ``...`` that does not follow two counts of a whole ratio and precede one more.
    """
    parts = [p.strip() for p in text.split(",")]
    if "..." not in parts:
        counts = [_rank_count(p, text) for p in parts]
        return sorted(set(counts))
    at = parts.index("...")
    if at < 2 or at != len(parts) - 2 or parts.count("...") > 1:
        raise UsageError(
            f"--ranks {text}: write a series as FIRST,SECOND,...,LAST, such as 2,4,...,4096"
        )
    head = [_rank_count(p, text) for p in parts[:at]]
    last = _rank_count(parts[-1], text)
    ratio, rest = divmod(head[-1], head[-2])
    if rest or ratio < 2 or any(b != a * ratio for a, b in itertools.pairwise(head)):
        raise UsageError(
            f"--ranks {text}: the counts before '...' must grow by a whole factor of 2 or "
            "more, such as 2,4,...,4096"
        )
    if last < head[-1]:
        raise UsageError(f"--ranks {text}: the last count must be at least {head[-1]}")
    counts = list(head)
    while counts[-1] * ratio <= last:
        counts.append(counts[-1] * ratio)
    if counts[-1] != last:
        counts.append(last)
    return counts


def parse_params(text: str) -> ParamCount:
    """``--params``: a count (``4810``, ``100M``, ``1.5e8``, ``2.5k``) or a zoo model,
    whose trainable parameters (``Network.trainable``, what the ranks exchange) are
    counted as the zoo builds it by default.

    :raises UsageError: one line, for a count below 1 or a name that is no zoo model.
    """
    raw = text.strip()
    match = _NUMBER.match(raw)
    if match:
        value = float(match.group(1)) * _SUFFIX[match.group(2).lower()]
        if not math.isfinite(value) or value < 1 or value != math.floor(value):
            raise UsageError(
                f"--params {text}: give a whole number of parameters, 1 or more (such as "
                "4810, 100M or 1.5e8), or a zoo model such as resnet20"
            )
        return ParamCount(int(value), None, raw)
    if raw.lstrip().startswith("-") or raw[:1].isdigit():
        raise UsageError(
            f"--params {text}: give a whole number of parameters, 1 or more (such as 4810, "
            "100M or 1.5e8), or a zoo model such as resnet20"
        )
    from d5core.lv1.zoo import build

    network = build(raw)
    arrays = network.parameters
    sizes = {name: int(arrays[name].size) for name in network.trainable}
    if not sizes:
        raise UsageError(f"--params {text}: the model has no trainable parameters")
    return ParamCount(sum(sizes.values()), sizes, raw)


def scheme_with_model(name: str) -> Any:
    """The distribution scheme ``name`` (a ``DistributedOptimizer`` class), checked to
    have a cost model.

    :raises UsageError: one line, for an unknown scheme or one without a model.
    """
    from d5core.lv3.launch import distribution_schemes, scheme_class

    cls = scheme_class(name)
    probe = cls.communication_cost(ranks=2, params=1024, itemsize=4, latency_s=1e-6,
                                   seconds_per_byte=1e-9, options={})  # fmt: skip
    if probe is None:
        modelled = [
            s for s in distribution_schemes()
            if scheme_class(s).communication_cost(ranks=2, params=1024, itemsize=4,
                                                  latency_s=1e-6, seconds_per_byte=1e-9,
                                                  options={}) is not None
        ]  # fmt: skip
        raise UsageError(
            f"scheme {name!r} has no communication cost model; schemes with one: "
            f"{', '.join(modelled) or 'none installed'}"
        )
    return cls


def cost_rows(
    scheme: Any,
    ranks: Sequence[int],
    params: ParamCount,
    itemsize: int,
    fit: CommFit,
    options: Mapping[str, Any],
) -> list[CostRow]:
    """The scheme's cost per step at each rank count, with ``fit``'s ``L``, ``G``, ``Gx``
    and ``R`` (``Gx`` and ``R`` when the fit measured them)."""
    if itemsize <= 0:
        raise UsageError(f"--itemsize {itemsize}: give the bytes per parameter, 1 or more")
    rows = []
    for n in ranks:
        cost = scheme.communication_cost(
            ranks=n, params=params.for_model(), itemsize=itemsize, latency_s=fit.latency_s,
            seconds_per_byte=fit.seconds_per_byte, options=dict(options),
            exchange_s_per_byte=fit.exchange_or_p2p_s_per_byte,
            reduce_s_per_byte=fit.reduce_s_per_byte,
        )  # fmt: skip
        if cost is None:
            raise UsageError(f"scheme {scheme.name!r} gave no cost for {n} ranks")
        rows.append(CostRow(n, cost))
    return rows


def draw_costs(rows: Sequence[CostRow], title: str, path: Path) -> Path:
    """A PNG at ``path``: seconds per step against ranks, with the latency and bandwidth
    parts, both axes logarithmic."""
    from d5core.report.style import new_figure

    figure = new_figure(7.0, 4.0)
    ax = figure.add_subplot(1, 1, 1)
    ranks = [r.ranks for r in rows]
    for label, values, style in (
        ("total", [r.cost.seconds for r in rows], "-o"),
        ("latency part", [r.cost.latency_seconds for r in rows], "--"),
        ("bandwidth part", [r.cost.bandwidth_seconds for r in rows], ":"),
        ("reduction part", [r.cost.reduce_seconds for r in rows], "-."),
    ):
        shown = [(n, v * 1e3) for n, v in zip(ranks, values, strict=True) if v > 0]
        if shown:
            ax.plot([n for n, _ in shown], [v for _, v in shown], style, label=label)
    if len(set(ranks)) > 1:
        ax.set_xscale("log", base=2)
    if any(r.cost.seconds > 0 for r in rows):
        ax.set_yscale("log")
    ax.set_xlabel("ranks")
    ax.set_ylabel("predicted communication per step (ms)")
    ax.set_title(title, fontsize=9)
    ax.legend()
    try:
        figure.savefig(path, format="png", dpi=120)
    except OSError as exc:
        raise UsageError(f"--plot {path}: cannot write it ({exc.strerror or exc})") from None
    return path
