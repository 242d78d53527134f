"""Discovery of installed plugins: statuses, reasons, isolation and laziness."""

from __future__ import annotations

import sys

import pytest

from d5core import PLUGIN_API_VERSION, PluginError
from d5core.plugins import PluginWarning, Status
from d5core.testing import FakeSite

GOOD = """
from d5core.hookspecs import hookimpl
d5_plugin_api = ">=1.0,<2"

@hookimpl
def d5_environment_info():
    return {"good": True}
"""


def _record(manager, name, group="d5.hooks"):
    matches = [r for r in manager.records if r.name == name and r.group == group]
    assert len(matches) == 1, [r.name for r in manager.records]
    return matches[0]


def _add_good(site: FakeSite) -> None:
    site.add(
        "d5-plugin-good",
        version="1.2.3",
        entry_points={"d5.hooks": {"good": "good_plugin"}},
        modules={"good_plugin.py": GOOD},
    )


def test_installed_plugin_is_listed_with_its_distribution_version_and_hooks(d5_site):
    _add_good(d5_site)
    rec = _record(d5_site.manager(), "good")
    assert (rec.distribution, rec.version, rec.status) == ("d5-plugin-good", "1.2.3", Status.OK)
    assert rec.hooks == ["d5_environment_info"]
    assert rec.error is None


def test_registered_plugin_hooks_are_called(d5_site):
    _add_good(d5_site)
    assert {"good": True} in d5_site.manager().hook.d5_environment_info()


def test_plugin_that_raises_on_import_fails_alone(d5_site):
    _add_good(d5_site)
    d5_site.add(
        "d5-plugin-boom",
        entry_points={"d5.hooks": {"boom": "boom_plugin"}},
        modules={"boom_plugin.py": "raise RuntimeError('kaboom at import')\n"},
    )
    manager = d5_site.manager()
    boom = _record(manager, "boom")
    assert boom.status is Status.FAILED
    assert "RuntimeError: kaboom at import" in boom.error
    assert "D5_DISABLE_PLUGINS=boom" in boom.error
    assert _record(manager, "good").status is Status.OK
    assert {"good": True} in manager.hook.d5_environment_info()


def test_missing_framework_is_reported_from_metadata_without_importing(d5_site):
    d5_site.add(
        "d5-plugin-needs-fw",
        requires=["d5-no-such-framework>=3.1"],
        entry_points={"d5.hooks": {"needsfw": "needsfw_plugin"}},
        modules={"needsfw_plugin.py": "raise AssertionError('must not be imported')\n"},
    )
    rec = _record(d5_site.manager(), "needsfw")
    assert rec.status is Status.FAILED
    assert "needs d5-no-such-framework>=3.1, which is not installed" in rec.error
    assert "pip install 'd5-no-such-framework>=3.1'" in rec.error
    assert "needsfw_plugin" not in sys.modules


def test_requirement_behind_an_extra_is_optional(d5_site):
    d5_site.add(
        "d5-plugin-extra",
        requires=['d5-no-such-framework; extra == "gpu"'],
        entry_points={"d5.hooks": {"extra": "extra_plugin"}},
        modules={"extra_plugin.py": GOOD},
    )
    assert _record(d5_site.manager(), "extra").status is Status.OK


def test_requirement_with_wrong_installed_version_names_both(d5_site):
    d5_site.add(
        "d5-plugin-oldpluggy",
        requires=["pluggy<0.1"],
        entry_points={"d5.hooks": {"oldpluggy": "oldpluggy_plugin"}},
        modules={"oldpluggy_plugin.py": GOOD},
    )
    rec = _record(d5_site.manager(), "oldpluggy")
    assert rec.status is Status.FAILED
    assert "needs pluggy<0.1 but pluggy" in rec.error


def test_hookimpl_with_argument_not_in_spec_fails_naming_it(d5_site):
    d5_site.add(
        "d5-plugin-badarg",
        entry_points={"d5.hooks": {"badarg": "badarg_plugin"}},
        modules={
            "badarg_plugin.py": """
            from d5core.hookspecs import hookimpl
            d5_plugin_api = ">=1.0,<2"

            @hookimpl
            def d5_synchronize(device, stream):
                pass
            """
        },
    )
    manager = d5_site.manager()
    rec = _record(manager, "badarg")
    assert rec.status is Status.FAILED
    assert "d5_synchronize takes 'stream'" in rec.error
    assert "it offers: device" in rec.error
    manager.hook.d5_synchronize(device="cpu")


def test_implementation_of_unknown_hook_fails_unless_optional(d5_site):
    d5_site.add(
        "d5-plugin-typo",
        entry_points={"d5.hooks": {"typo": "typo_plugin"}},
        modules={
            "typo_plugin.py": """
            from d5core.hookspecs import hookimpl
            d5_plugin_api = ">=1.0,<2"

            @hookimpl
            def d5_enviroment_info():
                return {}

            @hookimpl(optionalhook=True)
            def d5_future_hook():
                return {}
            """
        },
    )
    rec = _record(d5_site.manager(), "typo")
    assert rec.status is Status.FAILED
    assert "d5_enviroment_info, which is not a d5 hook" in rec.error
    assert "d5_future_hook" not in rec.error


def test_incompatible_api_range_names_both_versions(d5_site):
    d5_site.add(
        "d5-plugin-future",
        entry_points={"d5.hooks": {"future": "future_plugin"}},
        modules={"future_plugin.py": "d5_plugin_api = '>=7.0,<8'\n"},
    )
    rec = _record(d5_site.manager(), "future")
    assert rec.status is Status.INCOMPATIBLE
    assert ">=7.0,<8" in rec.error and f"plugin API {PLUGIN_API_VERSION}" in rec.error


@pytest.mark.parametrize(
    ("source", "expected"),
    [("", "declares no plugin API range"), ("d5_plugin_api = 'banana'\n", "invalid plugin API")],
)
def test_missing_or_invalid_api_declaration_is_incompatible(d5_site, source, expected):
    d5_site.add(
        "d5-plugin-noapi",
        entry_points={"d5.hooks": {"noapi": "noapi_plugin"}},
        modules={"noapi_plugin.py": source},
    )
    rec = _record(d5_site.manager(), "noapi")
    assert rec.status is Status.INCOMPATIBLE
    assert expected in rec.error


def test_disable_variable_turns_plugin_off_without_importing_it(d5_site):
    d5_site.add(
        "d5-plugin-off",
        entry_points={"d5.hooks": {"off": "off_plugin"}},
        modules={"off_plugin.py": "raise AssertionError('disabled plugins are not imported')\n"},
    )
    _add_good(d5_site)
    manager = d5_site.manager({"D5_DISABLE_PLUGINS": "off"})
    assert _record(manager, "off").status is Status.DISABLED
    assert "D5_DISABLE_PLUGINS" in _record(manager, "off").error
    assert _record(manager, "good").status is Status.OK


def test_disable_variable_matches_distribution_names(d5_site):
    _add_good(d5_site)
    manager = d5_site.manager({"D5_DISABLE_PLUGINS": "D5_Plugin_Good"})
    assert _record(manager, "good").status is Status.DISABLED


def test_load_variable_is_an_allow_list_that_keeps_the_core(d5_site):
    _add_good(d5_site)
    d5_site.add(
        "d5-plugin-other",
        entry_points={"d5.hooks": {"other": "other_plugin"}},
        modules={"other_plugin.py": GOOD.replace("good", "other")},
    )
    manager = d5_site.manager({"D5_LOAD_PLUGINS": "other"})
    assert _record(manager, "other").status is Status.OK
    assert _record(manager, "good").status is Status.DISABLED
    assert "D5_LOAD_PLUGINS" in _record(manager, "good").error
    assert _record(manager, "core").status is Status.OK


COMPONENT = """
import sys
sys.modules.setdefault("component_imports", []).append(__name__)
from d5core.levels.operators import OperatorBackend

class Backend(OperatorBackend):
    name = "fake"
    def supported(self):
        return ["Relu"]
    def create(self, op_type, attributes, inputs):
        raise NotImplementedError

NotABackend = 42
"""


def _add_components(site: FakeSite, hooks_source: str = GOOD) -> None:
    site.add(
        "d5-plugin-comp",
        entry_points={
            "d5.hooks": {"comp": "comp_plugin"},
            "d5.operators": {"fake": "comp_backend:Backend", "wrong": "comp_backend:NotABackend"},
        },
        modules={"comp_plugin.py": hooks_source, "comp_backend.py": COMPONENT},
    )


def test_components_are_listed_but_not_imported_until_loaded(d5_site):
    _add_components(d5_site)
    manager = d5_site.manager()
    rec = _record(manager, "fake", "d5.operators")
    assert rec.status is Status.OK
    assert rec.hooks == ["level 0: operator backend"]
    assert "comp_backend" not in sys.modules
    backend = manager.load("d5.operators", "fake")
    assert backend.name == "fake"
    assert "comp_backend" in sys.modules


def test_components_inherit_the_failure_of_their_plugin_module(d5_site):
    _add_components(d5_site, hooks_source="d5_plugin_api = '>=9'\n")
    manager = d5_site.manager()
    rec = _record(manager, "fake", "d5.operators")
    assert rec.status is Status.INCOMPATIBLE
    assert "its plugin module is incompatible" in rec.error
    with pytest.raises(PluginError, match="is incompatible"):
        manager.load("d5.operators", "fake")


def test_component_without_plugin_module_is_incompatible(d5_site):
    d5_site.add(
        "d5-plugin-lonely",
        entry_points={"d5.operators": {"lonely": "comp_backend:Backend"}},
        modules={"comp_backend.py": COMPONENT},
    )
    rec = _record(d5_site.manager(), "lonely", "d5.operators")
    assert rec.status is Status.INCOMPATIBLE
    assert "no d5.hooks entry point" in rec.error


def test_loading_an_unknown_component_names_what_is_installed(d5_site):
    _add_components(d5_site)
    with pytest.raises(PluginError, match=r"no level 0: operator backend named 'nope'.*fake"):
        d5_site.manager().load("d5.operators", "nope")


def test_check_imports_components_and_flags_wrong_kinds(d5_site):
    _add_components(d5_site)
    manager = d5_site.manager()
    manager.check()
    assert _record(manager, "fake", "d5.operators").status is Status.OK
    wrong = _record(manager, "wrong", "d5.operators")
    assert wrong.status is Status.FAILED
    assert "not a OperatorBackend" in wrong.error


def test_check_records_self_check_problems_and_exceptions_per_plugin(d5_site):
    for name, body in [
        ("sad", "return ['the widget is missing: pip install widget']"),
        ("crashy", "raise ValueError('self-check exploded')"),
        ("happy", "return []"),
    ]:
        d5_site.add(
            f"d5-plugin-{name}",
            entry_points={"d5.hooks": {name: f"{name}_plugin"}},
            modules={
                f"{name}_plugin.py": f"""
                from d5core.hookspecs import hookimpl
                d5_plugin_api = ">=1.0"

                @hookimpl
                def d5_plugin_check():
                    {body}
                """
            },
        )
    manager = d5_site.manager()
    manager.check()
    assert _record(manager, "sad").error == "the widget is missing: pip install widget"
    assert "ValueError: self-check exploded" in _record(manager, "crashy").error
    assert _record(manager, "happy").status is Status.OK


def test_call_each_isolates_a_failing_implementation(d5_plugin_manager):
    from d5core.hookspecs import hookimpl

    class Broken:
        @hookimpl
        def d5_environment_info(self):
            raise OSError("no sensors")

    class Fine:
        @hookimpl
        def d5_environment_info(self):
            return {"fine": 1}

    d5_plugin_manager.register(Broken(), "broken")
    d5_plugin_manager.register(Fine(), "fine")
    with pytest.warns(PluginWarning, match="'broken' failed in d5_environment_info"):
        outcomes = {o.plugin: o for o in d5_plugin_manager.call_each("d5_environment_info")}
    assert isinstance(outcomes["broken"].error, OSError)
    assert outcomes["fine"].result == {"fine": 1}


def test_merged_keeps_the_offer_called_first_and_reports_conflicts(d5_plugin_manager):
    from d5core.hookspecs import hookimpl

    class A:
        @hookimpl(tryfirst=True)
        def d5_custom_operators(self):
            return {"Relu": "a", "Tanh": "a"}

    class B:
        @hookimpl
        def d5_custom_operators(self):
            return {"Relu": "b"}

    d5_plugin_manager.register(A(), "a")
    d5_plugin_manager.register(B(), "b")
    message = "d5_custom_operators: 'Relu' is offered by both 'a' and 'b'; keeping the one from 'a'"
    with pytest.warns(PluginWarning) as caught:
        merged = d5_plugin_manager.merged("d5_custom_operators")
    assert merged == {"Relu": "a", "Tanh": "a"}
    assert [str(w.message) for w in caught] == [message]
    assert [(p.kind, p.plugins, p.message) for p in d5_plugin_manager.problems] == [
        ("clash", ("a", "b"), message)
    ]


def test_register_rejects_invalid_hooks_with_one_line(d5_plugin_manager):
    from d5core.hookspecs import hookimpl

    class Bad:
        @hookimpl
        def d5_memory_peak(self, device, extra):
            return None

    with pytest.raises(PluginError, match="d5_memory_peak takes 'extra'"):
        d5_plugin_manager.register(Bad(), "bad")


def test_builtin_plugin_recognises_slurm_and_leaves_mpi_launchers_to_their_plugin():
    from d5core.builtin import d5_detect_launcher

    step = {"SLURM_PROCID": "1", "SLURM_NTASKS": "4", "SLURM_STEP_ID": "0"}
    assert d5_detect_launcher(step) == {"launcher": "slurm", "rank": 1, "size": 4}
    # the step's own task count wins over the job's
    assert d5_detect_launcher({**step, "SLURM_STEP_NUM_TASKS": "2"})["size"] == 2
    assert d5_detect_launcher({"PMI_RANK": "1", "PMI_SIZE": "4"}) is None
    assert d5_detect_launcher({**step, "SLURM_PROCID": "x"}) is None


def test_a_slurm_batch_script_is_not_a_rank():
    """sbatch sets SLURM_PROCID=0 and SLURM_NTASKS=N in the script itself, which is one
    process: without a job step's variables it is no launched rank."""
    from d5core.builtin import d5_detect_launcher

    assert d5_detect_launcher({"SLURM_PROCID": "0", "SLURM_NTASKS": "2"}) is None
    assert d5_detect_launcher({}) is None
