"""Deliberately broken plugins, installed with pip, never break d5 or other plugins."""

from __future__ import annotations

import pytest

from d5core._version import PLUGIN_API_VERSION
from d5core.cli.output import read_json

BROKEN_NAMES = ("broken-import", "missing-framework", "bad-hookimpl", "incompatible")

EXPECTED = {
    "broken-import": (
        "failed",
        "ModuleNotFoundError: No module named 'd5_fixture_accelerator_sdk'",
    ),
    "missing-framework": (
        "failed",
        "needs d5-fixture-missing-framework>=1.0, which is not installed",
    ),
    "bad-hookimpl": (
        "failed",
        "d5_synchronize takes 'stream', which the specification does not offer",
    ),
    "incompatible": (
        "incompatible",
        f"supports plugin API >=2.0,<3 but d5core 0.1.0 offers plugin API {PLUGIN_API_VERSION}",
    ),
}


def _rows(stdout: str) -> dict[tuple[str, str], dict]:
    return {(r["group"], r["name"]): r for r in read_json(stdout, "list-plugins")}


@pytest.mark.parametrize("name", BROKEN_NAMES)
def test_each_broken_plugin_is_named_with_its_reason_and_the_rest_stays_ok(
    name, broken_site, run_d5
):
    others = [n for n in BROKEN_NAMES if n != name]
    result = run_d5(
        "list-plugins", "--json", path=[broken_site], env={"D5_DISABLE_PLUGINS": ",".join(others)}
    )
    assert result.returncode == 0, result.stderr
    rows = _rows(result.stdout)
    status, reason = EXPECTED[name]
    row = rows[("d5.hooks", name)]
    assert row["status"] == status
    assert reason in row["error"]
    assert row["distribution"] == f"d5-plugin-{name}"
    healthy = [r for key, r in rows.items() if key[1] not in BROKEN_NAMES and key[1] != "ghost"]
    assert healthy and all(r["status"] == "ok" for r in healthy), healthy


def test_table_names_every_broken_plugin_and_exits_zero(broken_site, run_d5):
    result = run_d5("list-plugins", path=[broken_site])
    assert result.returncode == 0, result.stderr
    for name in BROKEN_NAMES:
        line = next(line for line in result.stdout.splitlines() if f" {name} " in line)
        assert EXPECTED[name][0] in line


def test_check_exits_one_and_names_the_broken_plugins(broken_site, run_d5):
    result = run_d5("list-plugins", "--check", path=[broken_site])
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1
    for name in BROKEN_NAMES:
        assert name in result.stderr
    assert "Traceback" not in result.stderr


def test_components_of_a_plugin_with_a_missing_framework_are_failed_too(broken_site, run_d5):
    rows = _rows(run_d5("list-plugins", "--json", path=[broken_site]).stdout)
    ghost = rows[("d5.frameworks", "ghost")]
    assert ghost["status"] == "failed"
    assert "d5-fixture-missing-framework" in ghost["error"]


def test_broken_plugins_can_be_switched_off(broken_site, run_d5):
    result = run_d5(
        "list-plugins",
        "--check",
        path=[broken_site],
        env={"D5_DISABLE_PLUGINS": ",".join(f"d5-plugin-{n}" for n in BROKEN_NAMES)},
    )
    assert result.returncode == 0, result.stderr
    rows = _rows(
        run_d5(
            "list-plugins", "--json", path=[broken_site], env={"D5_DISABLE_PLUGINS": "incompatible"}
        ).stdout
    )
    assert rows[("d5.hooks", "incompatible")]["status"] == "disabled"
