"""Tests of the template plugin, in isolation, with d5core.testing's fixtures."""

import d5_plugin_template.plugin as plugin


def test_plugin_declares_a_compatible_api_range():
    from packaging.specifiers import SpecifierSet

    from d5core import PLUGIN_API_VERSION

    assert PLUGIN_API_VERSION in SpecifierSet(plugin.d5_plugin_api)


def test_environment_info_is_recorded(d5_plugin_manager):
    d5_plugin_manager.register(plugin)
    (info,) = d5_plugin_manager.hook.d5_environment_info()
    assert info["template"] == "0.1.0"


def test_self_check_passes(d5_plugin_manager):
    d5_plugin_manager.register(plugin)
    assert d5_plugin_manager.hook.d5_plugin_check() == [[]]
