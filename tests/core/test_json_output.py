"""Issue 13, item 5: every ``--json`` output is one envelope with a schema version, names
a run's id ``run_id``, is standard JSON (no NaN), and has the shape docs/json.md gives it.

The commands that need no plugin run here; ``run``, ``validate``, ``bench net`` and
``conformance`` are checked in tests/integration/test_json_output_cli.py.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import click
import numpy as np
import pytest
from json_schema_doc import check, sections

from d5core import __version__
from d5core.cli.app import cli
from d5core.cli.output import (
    SCHEMA_VARIANTS,
    SCHEMA_VERSIONS,
    json_text,
    read_json,
    schema_name,
)
from d5core.measure.engine import MeasureOptions
from d5core.measure.noise import NOISE_FLOOR_ENV
from d5core.plugins import PluginManager
from d5core.results import ResultsStore

ENV = {"packages": {"d5core": "0.1.0"}, "cpu": {"model": "Test CPU", "logical_cores": 2}}


def _strict(text: str) -> object:
    """Parse as standard JSON: NaN and Infinity are errors."""

    def refuse(name: str) -> object:
        raise ValueError(f"{name} in the output")

    return json.loads(text, parse_constant=refuse)


def _json_commands() -> set[str]:
    """Every core command (and subcommand) that takes ``--json``, by path."""
    found: set[str] = set()

    ctx = click.Context(cli)

    def walk(cmd: click.Command, path: str) -> None:
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                assert sub is not None, f"{path} {name}"
                walk(sub, f"{path} {name}".strip())
        elif any(p.name == "as_json" for p in cmd.params):
            found.add(path)

    walk(cli, "")
    return found


# -- the envelope ----------------------------------------------------------------------------


def test_every_core_command_with_json_declares_a_version_and_is_documented():
    documented = sections()
    assert _json_commands() == set(SCHEMA_VERSIONS) - set(SCHEMA_VARIANTS)
    assert set(documented) == set(SCHEMA_VERSIONS)
    for command, section in documented.items():
        assert section.schema == schema_name(command)
        assert section.keys, f"docs/json.md lists no key for d5 {command}"


def test_the_envelope_names_the_command_its_version_and_d5():
    document = _strict(json_text([], command="results list"))
    assert document == {"schema": "d5.results.list/1", "d5": __version__, "data": []}


def test_non_finite_numbers_are_written_as_null_never_as_nan():
    data = {
        "nan": float("nan"),
        "inf": [float("inf"), -math.inf],
        "numpy": np.float32("nan"),
        "count": np.int64(3),
        "nested": ({"x": np.float64(0.5)},),
    }
    text = json_text(data, command="run")
    assert "NaN" not in text and "Infinity" not in text
    assert _strict(text)["data"] == {
        "nan": None,
        "inf": [None, None],
        "numpy": None,
        "count": 3,
        "nested": [{"x": 0.5}],
    }


def test_read_json_refuses_nan_another_command_and_a_bare_document():
    with pytest.raises(ValueError, match="NaN is not standard JSON"):
        read_json('{"schema": "d5.run/1", "d5": "0", "data": NaN}')
    with pytest.raises(ValueError, match=r"expected the output of 'd5 run' \(d5.run/1\)"):
        read_json(json_text([], command="results list"), "run")
    with pytest.raises(ValueError, match="not a d5 --json document"):
        read_json("[]")


def test_a_command_without_a_declared_version_is_named_in_the_error():
    with pytest.raises(KeyError, match="'d5 frobnicate' prints JSON but declares no schema"):
        schema_name("frobnicate")


def test_the_doc_check_fails_a_run_called_id_a_missing_key_and_an_undocumented_one():
    example = {"string": "x", "integer": 0, "number": 0.5, "boolean": False, "object": {},
               "array": [], "null": None}  # fmt: skip
    row = {
        key.path.removeprefix("data[]."): example[sorted(key.types)[0]]
        for key in sections()["list-plugins"].keys
        if key.path.startswith("data[].")
    }
    check("list-plugins", [row])
    with pytest.raises(AssertionError, match="'id' but no 'run_id'"):
        check("results list", [{"id": "abc"}])
    with pytest.raises(AssertionError, match=r"data\[\]\.name \(at data\[0\]\.name\) is missing"):
        check("list-plugins", [{k: v for k, v in row.items() if k != "name"}])
    with pytest.raises(AssertionError, match=r"undocumented keys \{'surprise'\}"):
        check("list-plugins", [{**row, "surprise": 1}])


# -- the results commands, on a store written here ----------------------------------------


def _open(db: Path) -> ResultsStore:
    return ResultsStore.open(db, manager=PluginManager({}, discover_installed=False))


@pytest.fixture(scope="module")
def store_runs(tmp_path_factory) -> dict[str, object]:
    """Two op runs (one with a NaN sample and an infinite metric) and two train runs."""
    db = tmp_path_factory.mktemp("json") / "results.sqlite"
    ids: dict[str, object] = {"db": db}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "getloadavg", lambda: (0.1, 0.1, 0.1))
        rng = np.random.default_rng(0)
        for name in ("base", "cand"):
            with _open(db) as store, store.run("op", name, environment=ENV) as rid:
                samples = list(1e-3 * (1 + 0.01 * rng.standard_normal(24)))
                store.add_measurement(rid, "time", samples, unit="s",
                                      processes=[i % 3 for i in range(24)])  # fmt: skip
                store.add_measurement(rid, "odd", [1.0, float("nan"), 2.0], unit="1")
                store.add_metric(rid, "speedup", float("inf") if name == "base" else 2.0)
            ids[name] = rid
        for executor, tta in (("numpy", 1.5), ("torch", float("inf"))):
            with _open(db) as store:
                settings = {"executor": executor, "target_accuracy": 0.9}
                rid = store.begin_run("train", "digits-mlp", config={"settings": settings},
                                      environment=ENV, recipe_hash="h")  # fmt: skip
                store.add_metric(rid, "time_to_accuracy", tta, unit="s")
                store.add_metric(rid, "final_test_accuracy", 0.93)
                store.add_metric(rid, "throughput", 1e4, unit="samples/s")
                store.finish_run(rid, "complete")
            ids[executor] = rid
    return ids


def _json(d5_cli, command: str, *args: str) -> object:
    result = d5_cli(*command.split(), *args, "--json")
    assert result.exit_code == 0, result.stderr
    document = _strict(result.stdout)
    assert document["schema"] == schema_name(command) and document["d5"] == __version__
    return document["data"]


def test_results_list_names_each_run_run_id(store_runs, d5_cli):
    data = _json(d5_cli, "results list", "--db", str(store_runs["db"]))
    check("results list", data)
    assert {r["run_id"] for r in data} == {
        store_runs[k] for k in ("base", "cand", "numpy", "torch")
    }


def test_results_show_writes_an_infinite_metric_and_a_nan_sample_as_null(store_runs, d5_cli):
    data = _json(d5_cli, "results show", str(store_runs["base"]), "--samples",
                 "--db", str(store_runs["db"]))  # fmt: skip
    check("results show", data)
    assert data["run"]["run_id"] == store_runs["base"]
    (speedup,) = [m for m in data["metrics"] if m["name"] == "speedup"]
    assert speedup["value"] is None
    (odd,) = [m for m in data["measurements"] if m["metric"] == "odd"]
    assert odd["samples"] == [1.0, None, 2.0]


def test_results_export_is_the_envelope_too(store_runs, d5_cli, tmp_path):
    db = str(store_runs["db"])
    data = _json(d5_cli, "results export", str(store_runs["base"]), "--db", db)
    check("results export", data)
    assert [d["run"]["run_id"] for d in data["runs"]] == [store_runs["base"]]
    out = tmp_path / "export.json"
    written = d5_cli("results", "export", str(store_runs["base"]), "--format", "json",
                     "--output", str(out), "--db", db)  # fmt: skip
    assert written.exit_code == 0, written.stderr
    assert read_json(out.read_text(), "results export") == data


def test_results_compare_names_both_runs_run_id(store_runs, d5_cli):
    db = str(store_runs["db"])
    data = _json(d5_cli, "results compare", str(store_runs["base"]), str(store_runs["cand"]),
                 "--db", db)  # fmt: skip
    check("results compare", data)
    assert data["baseline"]["run_id"] == store_runs["base"]
    assert data["candidate"]["run_id"] == store_runs["cand"]
    (speedup,) = data["metrics"]
    assert speedup["baseline"] is None and speedup["ratio"] is None


def test_results_table_has_its_documented_shape(store_runs, d5_cli):
    data = _json(d5_cli, "results table", "--last", "10", "--db", str(store_runs["db"]))
    check("results table", data, by="executor")
    rows = {row["executor"]: row for row in data}
    assert rows["torch"]["time_to_accuracy"]["median"] is None  # infinite: not reached


# -- commands that measure, with no plugin installed ------------------------------------------


def test_list_plugins_has_its_documented_shape(d5_cli):
    check("list-plugins", _json(d5_cli, "list-plugins"))


def test_calibrate_has_its_documented_shape(d5_cli, tmp_path, monkeypatch):
    monkeypatch.setattr("d5core.measure.noise.competition", lambda *args, **kwargs: [])
    monkeypatch.setattr(
        "d5core.measure.noise.BRIEF_OPTIONS",
        MeasureOptions(warmup=0, min_samples=6, time_budget_s=0.01),
    )
    data = _json(d5_cli, "calibrate", "--brief", "--processes", "3",
                 "--db", str(tmp_path / "r.sqlite"))  # fmt: skip
    check("calibrate", data)


RELU_PLUGIN = """
from d5core.hookspecs import hookimpl
d5_plugin_api = ">=1.0,<2"

@hookimpl
def d5_environment_info():
    return {}
"""
RELU_BACKEND = """
import numpy as np
from d5core.levels.operators import Operator, OperatorBackend

class Relu(Operator):
    op_type = "Relu"
    def forward(self, inputs):
        return [np.maximum(inputs[0], 0)]

class Backend(OperatorBackend):
    name = "jsonrelu"
    def supported(self):
        return ["Relu"]
    def create(self, op_type, attributes, inputs):
        return Relu(attributes)
"""


def test_bench_op_has_its_documented_shape(d5_site, d5_cli, tmp_path, monkeypatch):
    d5_site.add(
        "d5-plugin-jsonrelu",
        entry_points={"d5.hooks": {"jsonrelu": "jsonrelu_plugin"},
                      "d5.operators": {"jsonrelu": "jsonrelu_backend:Backend"}},
        modules={"jsonrelu_plugin.py": RELU_PLUGIN, "jsonrelu_backend.py": RELU_BACKEND},
    )  # fmt: skip
    monkeypatch.setenv("PYTHONPATH", str(d5_site.path))
    monkeypatch.setenv(NOISE_FLOOR_ENV, "0.03")
    data = _json(d5_cli, "bench op", "Relu", "--backends", "jsonrelu", "--shape", "8x8",
                 "--processes", "1", "--warmup", "1", "--min-samples", "6",
                 "--time-budget", "0.02", "--db", str(tmp_path / "r.sqlite"))  # fmt: skip
    check("bench op", data)
    (row,) = data
    assert row["backend"] == "jsonrelu" and row["noise_floor"] == 0.03
