"""Building a custom operator: the cache, compile errors and skipped frameworks.

Only the numpy glue is built here (a few seconds); the torch and TensorFlow builds are
tested in their plugins.
"""

from __future__ import annotations

import types
from pathlib import Path

import numpy as np
import pytest

from d5core.api import hookimpl
from d5core.cli import app
from d5core.customop import build, builder, compiler
from d5core.customop.builder import cache_key
from d5core.errors import UsageError
from d5core.plugins import PluginManager

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "custom_ops" / "bias_gelu.cpp"


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ops")


@pytest.fixture(scope="module")
def built(cache: Path) -> builder.BuildResult:
    return build(EXAMPLE, ["numpy"], cache=cache)


def test_the_numpy_build_computes_bias_gelu(built):
    from scipy.special import erf

    op = built.builds["numpy"].create({"scale": 0.5})
    rng = np.random.default_rng(1)
    x, b = rng.standard_normal((3, 4)), rng.standard_normal(4)
    z = x + b
    expected = 0.5 * 0.5 * z * (1 + erf(z / np.sqrt(2)))
    np.testing.assert_allclose(op.forward([x, b])[0], expected, rtol=1e-14)
    assert op.forward([x.astype(np.float32), b.astype(np.float32)])[0].dtype == np.float32


def test_a_cached_build_runs_no_compiler(built, cache, monkeypatch):
    assert not built.builds["numpy"].cached

    def no_compiler(*args, **kwargs):
        raise AssertionError("the compiler ran for a cached build")

    # the compiler's identity (g++ --version) is part of the key; nothing compiles
    monkeypatch.setattr(builder, "syntax_check", no_compiler)
    monkeypatch.setattr(compiler, "compile_shared", no_compiler)
    monkeypatch.setattr(builder, "_build_one", no_compiler)
    again = build(EXAMPLE, ["numpy"], cache=cache)
    assert again.builds["numpy"].cached
    assert again.builds["numpy"].artifact == built.builds["numpy"].artifact


def test_the_key_changes_with_source_header_compiler_and_version():
    parts = (b"source", b"header", "g++ 12", "numpy", "1.0", b"glue")
    key = cache_key(*parts)
    for i in range(len(parts)):
        changed = list(parts)
        changed[i] = changed[i] + (b"!" if isinstance(changed[i], bytes) else "!")
        assert cache_key(*changed) != key, f"part {i} is not in the key"


def test_an_edited_source_is_built_anew(built, cache, tmp_path):
    edited = tmp_path / "bias_gelu.cpp"
    edited.write_text(EXAMPLE.read_text() + "\n// edited\n")
    again = build(edited, ["numpy"], cache=cache)
    assert not again.builds["numpy"].cached
    assert again.builds["numpy"].key != built.builds["numpy"].key


def test_an_edited_header_changes_the_build(built, cache, monkeypatch, tmp_path):
    header = tmp_path / "d5_op.h"
    header.write_text(builder.header_path().read_text() + "\n// edited\n")
    monkeypatch.setattr(builder, "header_path", lambda: header)
    monkeypatch.setattr(builder, "syntax_check", lambda source, include: None)
    keys: list[str] = []

    def record(glue, spec, text, key, final):
        keys.append(key)
        raise UsageError("stop here")

    monkeypatch.setattr(builder, "_build_one", record)
    with pytest.raises(UsageError, match="stop here"):
        build(EXAMPLE, ["numpy"], cache=cache)
    assert keys and keys[0] != built.builds["numpy"].key


def _broken(tmp_path: Path) -> Path:
    source = tmp_path / "broken_op.cpp"
    text = EXAMPLE.read_text().replace("const double scale = attrs.f(\"scale\");",
                                       "const double scale = attrs.f(\"scale\")", 1)  # fmt: skip
    source.write_text(text)
    return source


def test_a_syntax_error_exits_2_with_the_compilers_first_lines(tmp_path, capsys, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setitem(app.CORE_COMMANDS, "op", "d5core.cli.op_cmd:op")
    code = app.run(["op", "build", str(_broken(tmp_path)), "--cache", str(cache)])
    err = capsys.readouterr().err
    assert code == 2
    assert "compiling" in err and "failed" in err
    assert f"{tmp_path / 'broken_op.cpp'}:" in err and ": error: expected" in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) <= 1 + compiler.ERROR_LINES
    assert not any(p.is_file() for p in cache.rglob("*")), "a failed build left files"


def test_an_error_in_the_glue_compile_caches_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(builder, "syntax_check", lambda source, include: None)
    cache = tmp_path / "cache"
    with pytest.raises(UsageError, match=r"compiling bias_gelu for numpy failed:\n  .*broken_op"):
        build(_broken(tmp_path), ["numpy"], cache=cache)
    assert list((cache / "numpy").iterdir()) == []


class _Unavailable:
    """The glue of a framework that is not installed here."""

    name = "ghostframe"

    def available(self) -> bool:
        return False

    def version(self) -> str:
        raise AssertionError("a skipped framework's version is not asked for")

    def build(self, request, workdir):
        raise AssertionError("a skipped framework is not built")

    def load(self, artifact, spec):
        raise AssertionError("a skipped framework is not loaded")


def test_a_framework_that_is_not_installed_is_skipped_with_a_note(cache):
    plugin = types.SimpleNamespace(d5_custom_op_glue=hookimpl(lambda: _Unavailable()))
    manager = PluginManager(environ={}, discover_installed=False)
    manager.register(plugin, "ghost")
    notes: list[str] = []
    result = build(EXAMPLE, ["ghostframe", "mxnet"], cache=cache, manager=manager,
                   on_note=notes.append)  # fmt: skip
    assert result.builds == {}
    assert notes == [
        "ghostframe: skipped, ghostframe is not installed",
        "mxnet: skipped, no installed d5 plugin builds custom operators for it",
    ]
