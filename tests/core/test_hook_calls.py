"""Hooks are called one way, through pluggy: wrappers, firstresult and tracing work as
pluggy documents them, a failing plugin is left out and reported naming it, and merged
catalogues report clashes (d5's built-ins included) instead of silently keeping one."""

from __future__ import annotations

import types
import warnings
from collections.abc import Generator, Mapping
from pathlib import Path
from typing import Any

import pytest

from d5core.bus import MetricBus, attach_plugins
from d5core.errors import PluginError, UsageError
from d5core.hookspecs import hookimpl
from d5core.plugins import PluginWarning
from d5core.testing import FakeSite


def _plugin(**hooks: Any) -> types.SimpleNamespace:
    """A plugin object whose attributes are the given functions, marked ``@hookimpl``."""
    return types.SimpleNamespace(**{name: hookimpl(fn) for name, fn in hooks.items()})


# -- pluggy's semantics ------------------------------------------------------------------


def test_a_wrapper_wraps_the_whole_call_and_can_change_its_result(d5_plugin_manager) -> None:
    seen: list[object] = []

    class Renamer:
        @hookimpl(wrapper=True)
        def d5_custom_operators(self) -> Generator[None, list[Mapping[str, Any]], list[Any]]:
            seen.append("before")
            results = yield
            seen.append([sorted(r) for r in results])
            return [{f"Spy{k}": v for k, v in r.items()} for r in results]

    d5_plugin_manager.register(_plugin(d5_custom_operators=lambda: {"Relu": 1}), "ops-a")
    d5_plugin_manager.register(_plugin(d5_custom_operators=lambda: {"Tanh": 2}), "ops-b")
    d5_plugin_manager.register(Renamer(), "renamer")
    assert d5_plugin_manager.hook.d5_custom_operators() == [{"SpyTanh": 2}, {"SpyRelu": 1}]
    assert seen == ["before", [["Tanh"], ["Relu"]]]
    assert d5_plugin_manager.merged("d5_custom_operators") == {"SpyTanh": 2, "SpyRelu": 1}


def test_an_old_style_hookwrapper_can_force_the_result(d5_plugin_manager) -> None:
    class Forcer:
        @hookimpl(hookwrapper=True)
        def d5_environment_info(self) -> Generator[None, Any, None]:
            outcome = yield
            outcome.force_result([*outcome.get_result(), {"forced": True}])

    d5_plugin_manager.register(_plugin(d5_environment_info=lambda: {"own": 1}), "own")
    d5_plugin_manager.register(Forcer(), "forcer")
    assert d5_plugin_manager.hook.d5_environment_info() == [{"own": 1}, {"forced": True}]


def test_firstresult_skips_a_failing_plugin_and_stops_at_the_first_answer(
    d5_plugin_manager,
) -> None:
    calls: list[str] = []

    def answer(name: str, value: Any) -> Any:
        def d5_detect_launcher(environ: Mapping[str, str]) -> Any:
            calls.append(name)
            if value is RuntimeError:
                raise RuntimeError("cannot read the environment")
            return value

        return d5_detect_launcher

    d5_plugin_manager.register(_plugin(d5_detect_launcher=answer("last", {"rank": 9})), "last")
    d5_plugin_manager.register(_plugin(d5_detect_launcher=answer("second", {"rank": 1})), "2nd")
    d5_plugin_manager.register(_plugin(d5_detect_launcher=answer("first", RuntimeError)), "1st")
    with pytest.warns(PluginWarning, match=r"plugin '1st' failed in d5_detect_launcher"):
        found = d5_plugin_manager.hook.d5_detect_launcher(environ={})
    assert found == {"rank": 1}
    assert calls == ["first", "second"]


def test_a_hook_marked_propagates_lets_the_exception_through(d5_plugin_manager) -> None:
    def refuse(recipe: Mapping[str, Any]) -> None:
        raise UsageError("recipes with lr above 1 are not allowed here")

    d5_plugin_manager.register(_plugin(d5_recipe_loaded=refuse), "strict")
    with warnings.catch_warnings():
        warnings.simplefilter("error", PluginWarning)
        with pytest.raises(UsageError, match="lr above 1"):
            d5_plugin_manager.hook.d5_recipe_loaded(recipe={})
    assert d5_plugin_manager.problems == []


def test_tracing_writes_every_hook_call_and_its_result(d5_plugin_manager) -> None:
    lines: list[str] = []
    d5_plugin_manager.register(_plugin(d5_environment_info=lambda: {"traced": 1}), "t")
    stop = d5_plugin_manager.trace_calls(lines.append)
    d5_plugin_manager.hook.d5_environment_info()
    stop()
    d5_plugin_manager.hook.d5_environment_info()
    text = "".join(lines)
    assert "d5_environment_info" in text and "{'traced': 1}" in text
    assert text.count("finish d5_environment_info") == 1


def test_tracing_can_cut_long_lines(d5_plugin_manager) -> None:
    lines: list[str] = []
    d5_plugin_manager.register(_plugin(d5_environment_info=lambda: {"x" * 500: 1}), "long")
    d5_plugin_manager.trace_calls(lines.append, width=60)
    d5_plugin_manager.hook.d5_environment_info()
    finish = next(line for line in "".join(lines).splitlines() if "finish" in line)
    assert len(finish) == 64 and finish.endswith(" ...")


def test_debug_flag_traces_hook_calls_on_stderr(d5_plugin_manager, d5_cli) -> None:
    d5_plugin_manager.register(_plugin(d5_plugin_check=lambda: []), "checked")
    quiet = d5_cli("list-plugins", "--check")
    traced = d5_cli("--debug", "list-plugins", "--check")
    assert (quiet.exit_code, traced.exit_code) == (0, 0), traced.stderr
    assert "d5_plugin_check" not in quiet.stderr
    assert "d5: hook:" in traced.stderr and "finish d5_plugin_check --> [[]]" in traced.stderr


# -- isolation and reporting ---------------------------------------------------------------


def test_a_failing_plugin_is_reported_once_and_the_others_still_answer(d5_plugin_manager) -> None:
    def broken() -> None:
        raise OSError("no sensors")

    d5_plugin_manager.register(_plugin(d5_environment_info=broken), "broken")
    d5_plugin_manager.register(_plugin(d5_environment_info=lambda: {"fine": 1}), "fine")
    with pytest.warns(PluginWarning) as caught:
        first = d5_plugin_manager.hook.d5_environment_info()
        second = d5_plugin_manager.hook.d5_environment_info()
    assert first == second == [{"fine": 1}]
    assert [str(w.message) for w in caught] == [
        "plugin 'broken' failed in d5_environment_info (OSError: no sensors); d5 carried on "
        "without it"
    ]
    (problem,) = d5_plugin_manager.problems
    assert (problem.kind, problem.hook, problem.plugins) == (
        "failed",
        "d5_environment_info",
        ("broken",),
    )


def test_a_result_that_is_not_a_mapping_is_left_out_of_a_merge(d5_plugin_manager) -> None:
    d5_plugin_manager.register(_plugin(d5_custom_operators=lambda: ["Relu"]), "listy")
    d5_plugin_manager.register(_plugin(d5_custom_operators=lambda: {"Tanh": 1}), "fine")
    with pytest.warns(PluginWarning, match="'listy' returned list from d5_custom_operators"):
        assert d5_plugin_manager.merged("d5_custom_operators") == {"Tanh": 1}


def test_registering_a_plugin_twice_is_refused_with_one_line(d5_plugin_manager) -> None:
    plugin = _plugin(d5_environment_info=lambda: {})
    d5_plugin_manager.register(plugin, "once")
    with pytest.raises(PluginError, match="'again' is registered already, as 'once'"):
        d5_plugin_manager.register(plugin, "again")
    with pytest.raises(PluginError, match="a plugin named 'once' is registered already"):
        d5_plugin_manager.register(_plugin(d5_environment_info=lambda: {}), "once")


def test_a_plugin_module_that_fails_an_assertion_on_import_fails_alone(d5_site: FakeSite) -> None:
    d5_site.add(
        "d5-plugin-asserts",
        entry_points={"d5.hooks": {"asserts": "asserts_plugin"}},
        modules={"asserts_plugin.py": "assert False, 'needs a GPU'\n"},
    )
    manager = d5_site.manager()
    (rec,) = [r for r in manager.records if r.name == "asserts"]
    assert rec.status.value == "failed"
    assert "AssertionError: needs a GPU" in (rec.error or "")
    assert [r.status.value for r in manager.records if r.name == "core"] == ["ok"]


# -- built-ins are the core plugin's, and a clash with them is reported -------------------


ZOO_CLASH = """
from d5core.hookspecs import hookimpl
d5_plugin_api = ">=1.0"

def _mlp(**kwargs):
    raise AssertionError("the built-in mlp must be kept")

@hookimpl
def d5_model_zoo():
    return {"mlp": _mlp, "clash-only": _mlp}

@hookimpl
def d5_lr_schedules():
    return {"step": lambda **kw: None}
"""


def test_a_plugin_offering_a_builtin_name_is_reported_and_the_builtin_kept(
    d5_site: FakeSite,
) -> None:
    from d5core.lv1 import zoo
    from d5core.lv2.schedules import make_schedule
    from d5core.plugins import reset_plugin_manager

    d5_site.add(
        "d5-plugin-shadow",
        entry_points={"d5.hooks": {"shadow": "shadow_plugin"}},
        modules={"shadow_plugin.py": ZOO_CLASH},
    )
    reset_plugin_manager(d5_site.manager())
    with pytest.warns(PluginWarning) as caught:
        names = zoo.model_names()
        net = zoo.build("mlp")
        schedule = make_schedule({"name": "step", "lr": 1.0, "step_size": 1, "gamma": 0.5})
    assert "clash-only" in names and net.name == "mlp" and schedule(2) == 0.25
    assert sorted(str(w.message) for w in caught) == [
        "d5_lr_schedules: 'step' is offered by both 'd5core:builtins.lv2' and "
        "'d5-plugin-shadow:shadow'; keeping the one from 'd5core:builtins.lv2'",
        "d5_model_zoo: 'mlp' is offered by both 'd5core:builtins.lv1' and "
        "'d5-plugin-shadow:shadow'; keeping the one from 'd5core:builtins.lv1'",
    ]


def test_a_plugin_whose_zoo_raises_is_named_and_the_zoo_still_lists(d5_site: FakeSite) -> None:
    from d5core.lv1 import zoo
    from d5core.plugins import reset_plugin_manager

    d5_site.add(
        "d5-plugin-crashzoo",
        entry_points={"d5.hooks": {"crashzoo": "crashzoo_plugin"}},
        modules={
            "crashzoo_plugin.py": """
            from d5core.hookspecs import hookimpl
            d5_plugin_api = ">=1.0"

            @hookimpl
            def d5_model_zoo():
                raise ImportError("no module named fancy_models")
            """
        },
    )
    reset_plugin_manager(d5_site.manager())
    with pytest.warns(PluginWarning, match=r"'d5-plugin-crashzoo:crashzoo' failed in d5_model_zoo"):
        names = zoo.model_names()
    assert {"mlp", "lenet5"} <= set(names)


def test_check_fails_naming_both_plugins_of_a_clash(d5_site: FakeSite, d5_cli) -> None:
    d5_site.add(
        "d5-plugin-shadow",
        entry_points={"d5.hooks": {"shadow": "shadow_plugin"}},
        modules={"shadow_plugin.py": ZOO_CLASH},
    )
    result = d5_cli("list-plugins", "--check")
    assert result.exit_code == 1
    assert (
        "clash: d5_model_zoo: 'mlp' is offered by both 'd5core:builtins.lv1' and "
        "'d5-plugin-shadow:shadow'; keeping the one from 'd5core:builtins.lv1'" in result.stdout
    )
    assert result.stderr == (
        "d5: error: plugin check failed for: d5_model_zoo (d5core:builtins.lv1 and "
        "d5-plugin-shadow:shadow clash); d5_lr_schedules (d5core:builtins.lv2 and "
        "d5-plugin-shadow:shadow clash)\n"
    )


# -- every hook has its call site in the domain layer ---------------------------------------


def test_loading_a_recipe_shows_it_to_the_plugins_who_may_refuse_it(
    d5_plugin_manager, tmp_path: Path
) -> None:
    from d5core.lv2.recipes import load_recipe

    seen: list[Mapping[str, Any]] = []

    def inspect(recipe: Mapping[str, Any]) -> None:
        seen.append(recipe)
        if recipe["mutable"]["lr"] > 1:
            raise UsageError("this site refuses learning rates above 1")

    d5_plugin_manager.register(_plugin(d5_recipe_loaded=inspect), "site-policy")
    text = (
        '[fixed]\nmodel = "mlp"\ndataset = "digits"\nepochs = 1\n'
        '[mutable]\nexecutor = "numpy"\noptimizer = "sgd"\nlr = LR\nbatch_size = 8\n'
    )
    (tmp_path / "ok.toml").write_text(text.replace("LR", "0.1"))
    (tmp_path / "bad.toml").write_text(text.replace("LR", "5.0"))
    recipe = load_recipe(tmp_path / "ok.toml")
    (view,) = seen
    assert (view["name"], view["hash"], view["fixed"]["model"]) == ("ok", recipe.hash, "mlp")
    with pytest.raises(TypeError):
        view["fixed"] = {}  # type: ignore[index]
    with pytest.raises(UsageError, match="refuses learning rates above 1"):
        load_recipe(tmp_path / "bad.toml")


def test_a_training_run_lets_the_plugins_subscribe_to_its_bus_before_it_starts(
    d5_plugin_manager,
) -> None:
    from d5core.lv2.trainer import RUN_START, RunClock

    heard: list[str] = []

    def subscribe(bus: MetricBus) -> None:
        bus.subscribe(RUN_START, lambda event: heard.append(event.name))

    d5_plugin_manager.register(_plugin(d5_bus_subscribe=subscribe), "listener")
    clock = RunClock.start(metrics=[])
    attach_plugins(clock.bus)  # a second attach to the same bus subscribes nobody again
    clock.bus.publish(RUN_START)
    assert heard == [RUN_START, RUN_START]


def test_every_manager_has_the_internal_plugins_of_the_kernel_and_levels_and_nothing_else(
    d5_plugin_manager,
) -> None:
    from d5core.lv1 import zoo
    from d5core.plugins.selection import selection_warnings

    assert {"mlp", "lenet5", "resnet20"} <= set(zoo.model_names())
    records = {rec.name: rec for rec in d5_plugin_manager.records}
    assert {(r.distribution, r.status.value) for r in records.values()} == {("d5core", "ok")}
    assert {name: rec.hooks for name, rec in records.items()} == {
        "builtins": ["d5_cli_commands", "d5_worker_jobs"],
        "builtins.lv0": ["d5_cli_commands", "d5_operator_shape_suites", "d5_report_figures",
                         "d5_results_tables", "d5_worker_jobs"],
        "builtins.lv1": ["d5_cli_commands", "d5_graph_passes", "d5_model_zoo",
                         "d5_report_figures", "d5_results_tables", "d5_worker_jobs"],
        "builtins.lv2": ["d5_cli_commands", "d5_lr_schedules", "d5_report_figures",
                         "d5_results_tables"],
        "builtins.lv3": ["d5_cli_commands", "d5_report_figures"],
        "builtins.loadgen": ["d5_report_figures"],
        "builtins.report": ["d5_cli_commands", "d5_report_figures"],
        "builtins.teamstore": ["d5_cli_commands", "d5_results_backend"],
        "builtins.trace": ["d5_cli_commands"],
    }  # fmt: skip
    assert d5_plugin_manager.hook.d5_environment_info() == []
    (line,) = selection_warnings({"D5_DISABLE_PLUGINS": "builtins"}, [])
    assert "part of d5core, which is always on" in line
