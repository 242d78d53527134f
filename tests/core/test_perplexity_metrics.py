"""The perplexity metrics read test passes: ``perplexity``, else ``exp(loss)``; lower
is better, and time to perplexity stops at the first pass at or below the target."""

from __future__ import annotations

import math

import pytest

from d5core.bus import MetricBus
from d5core.lv2.metrics.perplexity import (
    FinalPerplexity,
    TimeToPerplexity,
    ValidationPerplexity,
    perplexity_of_loss,
)


def _passes(bus: MetricBus, payloads: list[dict[str, float]]) -> None:
    bus.publish("run.start", level=2)
    for step, payload in enumerate(payloads):
        with bus.span("test.pass", level=2, step=step, epoch=0) as sp:
            sp.set(**payload)


def test_the_curve_best_final_and_time_to_the_target():
    bus = MetricBus()
    metrics = [ValidationPerplexity(), FinalPerplexity(), TimeToPerplexity(target=6.0)]
    for metric in metrics:
        metric.attach(bus)
    _passes(bus, [{"perplexity": 9.0}, {"loss": math.log(5.5)}, {"perplexity": 5.8}])
    curve, final, ttp = (m.result() for m in metrics)
    assert [p["perplexity"] for p in curve["curve"]] == pytest.approx([9.0, 5.5, 5.8])
    assert curve["value"] == pytest.approx(5.5) and curve["best_pass"] == 1
    assert final["value"] == pytest.approx(5.8) and final["passes"] == 3
    assert ttp["reached"] is True and ttp["passes"] == 2 and ttp["value"] > 0
    assert ttp["mode"] == "min" and ttp["key"] == "perplexity"
    assert all(m.better == "lower" for m in metrics)


def test_a_target_never_reached_gives_no_time_and_the_best_seen():
    bus = MetricBus()
    metric = TimeToPerplexity(target=2.0)
    metric.attach(bus)
    _passes(bus, [{"perplexity": 9.0}, {"perplexity": 7.5}])
    out = metric.result()
    assert out["value"] is None and out["reached"] is False and out["best"] == 7.5


def test_perplexity_of_a_loss():
    assert perplexity_of_loss(math.log(4.0)) == pytest.approx(4.0)
    assert perplexity_of_loss(1e4) == math.inf
    assert math.isnan(perplexity_of_loss(math.nan))
