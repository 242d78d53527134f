"""Conformance records the operators an executor ran on its fallback engine (numpy's
onnx.reference) and counts the passed cases that needed it."""

from __future__ import annotations

from d5_plugin_numpy.executor import NumpyExecutor

from d5core.testing.executors import ConformanceReport, node_cases, run_case


def test_cases_record_the_fallback_and_the_report_counts_it() -> None:
    cases = {c.name: c for c in node_cases(r"^test_(sin|relu)$")}
    on_fallback = run_case(NumpyExecutor, cases["test_sin"], op_type="Sin")
    native = run_case(NumpyExecutor, cases["test_relu"], op_type="Relu")
    assert on_fallback.status == "passed" and on_fallback.fallback == ("Sin",)
    assert native.status == "passed" and native.fallback == ()
    report = ConformanceReport("numpy", results=[on_fallback, native])
    assert report.passed == 2
    assert report.passed_with_fallback == 1
    data = report.to_json()
    assert data["passed_with_fallback"] == 1
    assert [list(c["fallback"]) for c in data["cases"]] == [["Sin"], []]
