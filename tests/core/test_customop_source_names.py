"""A custom operator source's file name reaches generated C++ (the ``#line`` that makes
the compiler name the user's file), so it must never be able to inject code there
(issue 28, section 3): a name with a control character is refused in one line, and
every other name is written as an escaped string literal the compiler reads back as
the very same name."""

from __future__ import annotations

import os
import types
from pathlib import Path

import pytest
from customop_probe import ProbeGlue

from d5core.api import PluginManager, UsageError, hookimpl
from d5core.testing.customop import build, forbid_compiling, skip_syntax_check

OPERATOR = """\
#include <d5_op.h>
D5_OP_NAME("named_op");
D5_OP_INPUTS("X");
D5_OP_OUTPUTS("Y");
void forward(const d5::Inputs& in, d5::Outputs& out, const d5::Attributes& attrs) {{ {body} }}
void backward(const d5::Inputs& grad_out, const d5::Inputs& in, d5::Outputs& grad_in,
              const d5::Attributes& attrs) {{}}
"""

#: Shell and C++ metacharacters: quotes, a backslash, $( ), `, ;, &, |, <, >, and with the
#: folder's end a trigraph (``??/`` reads as a backslash where trigraphs are on).
METACHARACTERS = "we\"ird 'op' \\ $(touch pwned) `id`; & | <x> ??/#define.cpp"


@pytest.fixture
def manager() -> PluginManager:
    made = PluginManager(environ={}, discover_installed=False)
    made.register(types.SimpleNamespace(d5_custom_op_glue=hookimpl(lambda: ProbeGlue())), "probe")
    return made


def test_a_newline_in_the_source_name_is_refused_not_injected(tmp_path, manager, monkeypatch):
    source = tmp_path / 'op.cpp"\n#error injected by the name\n#.cpp'
    source.write_text(OPERATOR.format(body=""))
    forbid_compiling(monkeypatch)
    with pytest.raises(UsageError, match=r"name .* holds a control character") as caught:
        build(source, ["probe"], cache=tmp_path / "cache", manager=manager)
    assert "\n" not in str(caught.value), "the message is not one line"
    assert not (tmp_path / "cache").exists()


def test_a_newline_in_the_source_name_is_one_line_and_exit_2_from_the_command(tmp_path, d5_cli):
    source = tmp_path / "op\n.cpp"
    source.write_text(OPERATOR.format(body=""))
    result = d5_cli("op", "build", str(source), "--cache", str(tmp_path / "cache"))
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "control character" in result.stderr


def test_metacharacters_in_the_source_name_reach_the_compiler_as_the_name(
    tmp_path, manager, monkeypatch
):
    source = tmp_path / METACHARACTERS
    source.parent.mkdir()
    source.write_text(OPERATOR.format(body="int broken = ;"))
    skip_syntax_check(monkeypatch)  # so that the error comes from the generated copy
    with pytest.raises(UsageError) as caught:
        build(source, ["probe"], cache=tmp_path / "cache", manager=manager)
    assert f"{source}:5:" in str(caught.value), "the compiler did not name the user's file"
    assert not (tmp_path / "pwned").exists()


def test_a_source_name_with_metacharacters_builds_and_loads(tmp_path, manager):
    source = tmp_path / METACHARACTERS
    source.parent.mkdir()
    source.write_text(OPERATOR.format(body=""))
    done = build(source, ["probe"], cache=tmp_path / "cache", manager=manager)
    done.builds["probe"].kernels()
    assert done.source == source


def test_a_source_name_that_is_not_utf8_builds_without_an_internal_error(tmp_path, manager):
    source = Path(os.fsdecode(bytes(tmp_path) + b"/op-\xff\xfe.cpp"))
    source.write_text(OPERATOR.format(body=""))
    done = build(source, ["probe"], cache=tmp_path / "cache", manager=manager)
    assert "probe" in done.builds
