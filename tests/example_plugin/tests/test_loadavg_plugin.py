"""The plugin tested in isolation with d5core.testing's fixtures."""

import json

import d5_loadavg.plugin as plugin


def test_environment_info_reports_load_per_core(d5_plugin_manager):
    d5_plugin_manager.register(plugin)
    (info,) = d5_plugin_manager.hook.d5_environment_info()
    assert len(info["load"]) == 3
    assert info["load_per_core_1min"] == info["load"][0] / info["cores"]


def test_loadavg_command_prints_json(d5_plugin_manager, d5_cli):
    d5_plugin_manager.register(plugin)
    result = d5_cli("loadavg", "--json")
    assert result.exit_code == 0, result.stderr
    assert set(json.loads(result.stdout)) == {"load", "cores", "load_per_core_1min", "quiet"}


def test_loadavg_command_calls_a_loaded_machine_busy(d5_plugin_manager, d5_cli, monkeypatch):
    monkeypatch.setattr(plugin.os, "getloadavg", lambda: (3.0, 1.0, 0.5))
    monkeypatch.setattr(plugin.os, "cpu_count", lambda: 4)
    d5_plugin_manager.register(plugin)
    result = d5_cli("loadavg")
    assert result.stdout.strip() == "load 0.75 per core over 1 min: busy: expect noisy measurements"
