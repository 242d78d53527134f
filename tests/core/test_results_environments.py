"""Issue 16, item 6: runs made in different environments (MXNet's virtualenv with numpy
1.23 beside the one with torch) meet in one store; ``d5 results table`` puts operator,
network and training runs side by side, tags each value with its environment, names
what differs (numpy, BLAS, thread variables, framework versions) and never refuses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from d5core.cli.output import read_json
from d5core.plugins import PluginManager
from d5core.results import ResultsStore


def _env(numpy: str, blas: str, framework: tuple[str, str], threads: str | None) -> dict:
    name, version = framework
    return {
        "cpu": {"model": "Test CPU", "usable_cores": 2},
        "python": {
            "implementation": "CPython",
            "version": "3.11.7",
            "executable": f"/venvs/{name}/bin/python",
        },
        "threads": {"OMP_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": None},
        "frameworks": {
            "d5core:core": {"numpy": numpy},
            "d5-plugin-numpy:numpy": {"numpy": numpy, "blas": {"name": blas, "version": "0.3"}},
            f"d5-plugin-{name}:{name}": {name: version},
        },
    }


TORCH_ENV = _env("2.4.6", "scipy-openblas", ("torch", "2.13.0"), None)
MXNET_ENV = _env("1.23.5", "openblas64_", ("mxnet", "1.9.1"), "2")


def _store(db: Path) -> ResultsStore:
    return ResultsStore.open(db, manager=PluginManager({}, discover_installed=False))


def _bench_op(db: Path, env: dict, backends: dict[str, float], op: str = "Conv") -> str:
    """An operator benchmark stored the way ``d5 bench op`` stores one."""
    with _store(db) as store:
        rid = store.begin_run("op", f"bench {op}", config={"op": op}, environment=env)
        for backend, base in backends.items():
            labels = {"backend": backend, "problem": "conv 1x3x8x8", "direction": "forward",
                      "dtype": "float32"}  # fmt: skip
            store.add_measurement(rid, "time", [base * (1 + i / 100) for i in range(9)],
                                  labels=labels)  # fmt: skip
        store.finish_run(rid)
    return rid


def _validation(db: Path, env: dict, backend: str, passed: bool, op: str = "Conv") -> None:
    with _store(db) as store:
        config = {"op": op, "backend": backend, "dtype": "float32", "problem": "p"}
        rid = store.begin_run("validate", f"{op} {backend}", config=config, environment=env)
        store.add_metric(rid, "passed", float(passed))
        store.finish_run(rid)


def _bench_net(db: Path, env: dict, executor: str, base: float) -> str:
    with _store(db) as store:
        rid = store.begin_run("net", "bench lenet5", config={"model": "lenet5"}, environment=env)
        labels = {"executor": executor, "mode": "inference", "batch": 32}
        store.add_measurement(rid, "time", [base] * 8, labels=labels)
        store.finish_run(rid)
    return rid


def _table(d5_cli: Any, db: Path, *args: str) -> tuple[list[dict], str]:
    result = d5_cli("results", "table", "--json", "--db", str(db), *args)
    assert result.exit_code == 0, result.output
    return read_json(result.stdout), result.stderr


def test_operator_runs_of_two_environments_share_a_row_tagged_by_environment(
    d5_cli: Any, tmp_path: Path
) -> None:
    db = tmp_path / "r.sqlite"
    _bench_op(db, TORCH_ENV, {"numpy": 4e-3, "torch": 1e-3})
    _bench_op(db, MXNET_ENV, {"mxnet": 2e-3})
    _validation(db, MXNET_ENV, "mxnet", True)
    _validation(db, TORCH_ENV, "torch", False)

    table, warned = _table(d5_cli, db, "--last", "10", "--kind", "op")

    (row,) = table
    assert row["op"] == "Conv" and set(row["cells"]) == {"numpy", "torch", "mxnet"}
    cells = row["cells"]
    assert cells["torch"]["environment"] == cells["numpy"]["environment"]
    assert cells["mxnet"]["environment"] != cells["torch"]["environment"]
    assert abs(cells["mxnet"]["median"] - 2e-3 * 1.04) < 1e-9
    assert cells["mxnet"]["validated"] is True
    assert cells["torch"]["validated"] is False
    assert cells["numpy"]["validated"] is None
    assert row["environments"] == ["E1", "E2"]
    assert set(row["environment_facts"]) == {"E1", "E2"}
    differences = "\n".join(row["environment_differences"])
    assert "numpy: E1 1.23.5, E2 2.4.6" in differences
    assert "BLAS" in differences and "thread variables" in differences
    assert "mxnet" in differences and "torch" in differences
    assert "2 environments" in warned and "numpy" in warned


def test_a_single_environment_gives_no_warning_and_the_newest_run_wins(
    d5_cli: Any, tmp_path: Path
) -> None:
    db = tmp_path / "r.sqlite"
    _bench_op(db, TORCH_ENV, {"torch": 5e-3})
    _bench_op(db, TORCH_ENV, {"torch": 1e-3})

    table, warned = _table(d5_cli, db, "--last", "10", "--kind", "op")

    cell = table[0]["cells"]["torch"]
    assert abs(cell["median"] - 1.04e-3) < 1e-9 and cell["older_runs"] == 1
    assert table[0]["environment_differences"] == [] and "environments" not in warned


def test_network_runs_of_two_environments_are_compared_by_executor(
    d5_cli: Any, tmp_path: Path
) -> None:
    db = tmp_path / "r.sqlite"
    _bench_net(db, TORCH_ENV, "torch", 2e-3)
    _bench_net(db, MXNET_ENV, "mxnet", 3e-3)

    table, _ = _table(d5_cli, db, "--last", "10", "--kind", "net")

    (row,) = table
    assert (row["model"], row["mode"], row["batch"]) == ("lenet5", "inference", 32)
    assert row["cells"]["torch"]["median"] == 2e-3 and row["cells"]["mxnet"]["median"] == 3e-3
    assert row["cells"]["torch"]["environment"] != row["cells"]["mxnet"]["environment"]


def test_the_text_table_shows_every_backend_and_the_legend(d5_cli: Any, tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    _bench_op(db, TORCH_ENV, {"torch": 1e-3})
    _bench_op(db, MXNET_ENV, {"mxnet": 2e-3})

    result = d5_cli("results", "table", "--last", "5", "--kind", "op", "--db", str(db))

    assert result.exit_code == 0, result.output
    for text in ("torch", "mxnet", "E1", "E2", "2.00x", "numpy 1.23.5", "numpy 2.4.6"):
        assert text in result.stdout, text


def test_training_rows_name_the_environments_of_their_runs(d5_cli: Any, tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    for env, executor in ((TORCH_ENV, "torch"), (MXNET_ENV, "mxnet")):
        with _store(db) as store:
            rid = store.begin_run("train", "digits-mlp", config={"settings": {
                "executor": executor}}, environment=env, recipe_hash="h")  # fmt: skip
            store.add_metric(rid, "final_test_accuracy", 0.9)
            store.finish_run(rid)

    rows, warned = _table(d5_cli, db, "--last", "10", "--kind", "train")

    by_executor = {row["executor"]: row["environments"] for row in rows}
    assert by_executor["torch"] != by_executor["mxnet"]
    assert "numpy" in warned


def test_an_unknown_table_kind_is_refused_in_one_line(d5_cli: Any, tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    _bench_op(db, TORCH_ENV, {"torch": 1e-3})

    result = d5_cli("results", "table", "--last", "5", "--kind", "measure", "--db", str(db))

    assert result.exit_code == 2
    assert "--kind 'measure' has no table; use op, net or train" in result.stderr


def test_operator_and_network_tables_have_their_documented_json_shape(
    d5_cli: Any, tmp_path: Path
) -> None:
    from json_schema_doc import check

    db = tmp_path / "r.sqlite"
    _bench_op(db, TORCH_ENV, {"numpy": 4e-3, "torch": 1e-3})
    _validation(db, TORCH_ENV, "torch", True)
    _bench_net(db, MXNET_ENV, "mxnet", 3e-3)

    for kind in ("op", "net"):
        table, _ = _table(d5_cli, db, "--last", "10", "--kind", kind)
        assert table
        check("results table", table, by="executor")


def test_compare_across_environments_names_numpy_and_blas_first_and_does_not_refuse(
    d5_cli: Any, tmp_path: Path
) -> None:
    db = tmp_path / "r.sqlite"
    torch_run = _bench_op(db, TORCH_ENV, {"numpy": 4e-3})
    mxnet_run = _bench_op(db, MXNET_ENV, {"numpy": 5e-3})

    result = d5_cli("results", "compare", torch_run, mxnet_run, "--db", str(db))

    assert result.exit_code in (0, 1), result.stderr  # a verdict, not a refusal
    warning = next(line for line in result.stderr.splitlines() if "different environments" in line)
    shown = warning.split("(", 1)[1]
    assert "numpy" in shown.split(";")[0] or "blas" in shown.split(";")[0].lower()
    assert "blas" in warning.lower() and "1.23.5" in warning
