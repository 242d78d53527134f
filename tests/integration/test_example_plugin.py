"""The example third-party plugin, installed with pip from its folder, is listed and called."""

from __future__ import annotations

import json

from d5core.cli.output import read_json


def test_example_plugin_is_listed_ok(example_site, run_d5):
    result = run_d5("list-plugins", "--json", path=[example_site])
    assert result.returncode == 0, result.stderr
    row = next(r for r in read_json(result.stdout) if r["name"] == "loadavg")
    assert row["status"] == "ok"
    assert row["distribution"] == "d5-plugin-loadavg"
    assert row["version"] == "1.0.0"
    assert row["hooks"] == ["d5_cli_commands", "d5_environment_info"]


def test_example_plugin_command_is_called(example_site, run_d5):
    result = run_d5("loadavg", "--json", path=[example_site])
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["cores"] >= 1 and len(report["load"]) == 3


def test_example_plugin_hook_is_called_through_the_manager(example_site, run_d5, tmp_path):
    import subprocess
    import sys

    code = (
        "from d5core.plugins import get_plugin_manager;"
        "import json;"
        "print(json.dumps([r for r in get_plugin_manager().hook.d5_environment_info()"
        " if 'load_per_core_1min' in r]))"
    )
    import os

    env = {**os.environ, "PYTHONPATH": str(example_site)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    (report,) = json.loads(out.stdout)
    assert "quiet" in report
