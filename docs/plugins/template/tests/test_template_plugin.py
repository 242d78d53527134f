"""The template's plugin module, and its entry points as d5 discovers them.

These run with the template installed (``pip install -e '.[test]'``) next to d5's
reference backend, as in the ``example`` nox session.
"""

from importlib.metadata import distribution, version

import d5_plugin_template.plugin as plugin
from d5_plugin_template.operators import TemplateRelu
from packaging.specifiers import SpecifierSet

from d5core.api import (
    PLUGIN_API_VERSION,
    Dataset,
    GraphExecutor,
    Metric,
    OperatorBackend,
    get_plugin_manager,
)

DISTRIBUTION = "d5-plugin-template"


def test_plugin_declares_an_api_range_this_core_satisfies():
    assert PLUGIN_API_VERSION in SpecifierSet(plugin.d5_plugin_api)


def test_environment_info_records_the_installed_version(d5_plugin_manager):
    d5_plugin_manager.register(plugin)
    (info,) = d5_plugin_manager.hook.d5_environment_info()
    assert info[DISTRIBUTION] == version(DISTRIBUTION)


def test_self_check_passes_and_reports_a_broken_operator(d5_plugin_manager, monkeypatch):
    d5_plugin_manager.register(plugin)
    assert d5_plugin_manager.hook.d5_plugin_check() == [[]]
    monkeypatch.setattr(TemplateRelu, "forward", lambda self, inputs: [inputs[0]])
    ((problem,),) = d5_plugin_manager.hook.d5_plugin_check()
    assert problem.startswith("Relu of [-1, 2] gave [-1.0, 2.0], not [0, 2]")


def test_every_entry_point_loads_a_component_of_its_level():
    interfaces = {
        "d5.operators": OperatorBackend,
        "d5.frameworks": GraphExecutor,
        "d5.metrics": Metric,
    }
    entry_points = distribution(DISTRIBUTION).entry_points
    assert {ep.group for ep in entry_points} == {"d5.hooks", "d5.datasets", *interfaces}
    for ep in entry_points:
        component = ep.load()
        if ep.group in interfaces:
            assert issubclass(component, interfaces[ep.group]), ep
        elif ep.group == "d5.datasets":
            assert isinstance(component("train"), Dataset), ep


def test_d5_finds_every_entry_ok_when_it_checks_the_plugins():
    """What ``d5 list-plugins --check`` reports for the template's entries."""
    records = [r for r in get_plugin_manager().check() if r.distribution == DISTRIBUTION]
    assert {(r.group, r.name) for r in records} == {
        ("d5.hooks", "template"),
        ("d5.operators", "template"),
        ("d5.frameworks", "template"),
        ("d5.metrics", "template_slowest_step"),
        ("d5.datasets", "template_circle"),
    }
    assert {r.name: r.error for r in records if r.status != "ok"} == {}
