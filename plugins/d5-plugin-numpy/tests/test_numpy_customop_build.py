"""Building a custom operator: the cache, compile errors and skipped frameworks.

Only the numpy glue is built here (a few seconds); the torch and TensorFlow builds are
tested in their plugins.
"""

from __future__ import annotations

import types
from pathlib import Path

import numpy as np
import pytest

from d5core.api import PluginManager, UsageError, hookimpl
from d5core.testing.customop import (
    ERROR_LINES,
    BuildResult,
    build,
    cache_key,
    forbid_compiling,
    header_path,
    skip_syntax_check,
    stop_before_compiling,
    use_header,
)

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "custom_ops" / "bias_gelu.cpp"


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ops")


@pytest.fixture(scope="module")
def built(cache: Path) -> BuildResult:
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

    # the compiler's identity (g++ --version) is part of the key; nothing compiles
    forbid_compiling(monkeypatch)
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
    header.write_text(header_path().read_text() + "\n// edited\n")
    use_header(monkeypatch, header)
    skip_syntax_check(monkeypatch)
    keys = stop_before_compiling(monkeypatch)
    with pytest.raises(UsageError, match="stop here"):
        build(EXAMPLE, ["numpy"], cache=cache)
    assert keys and keys[0] != built.builds["numpy"].key


def _broken(tmp_path: Path) -> Path:
    source = tmp_path / "broken_op.cpp"
    text = EXAMPLE.read_text().replace("const double scale = attrs.f(\"scale\");",
                                       "const double scale = attrs.f(\"scale\")", 1)  # fmt: skip
    source.write_text(text)
    return source


def test_a_syntax_error_exits_2_with_the_compilers_first_lines(tmp_path, d5_cli):
    cache = tmp_path / "cache"
    result = d5_cli("op", "build", str(_broken(tmp_path)), "--cache", str(cache))
    err = result.stderr
    assert result.exit_code == 2
    assert "compiling" in err and "failed" in err
    assert f"{tmp_path / 'broken_op.cpp'}:" in err and ": error: expected" in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) <= 1 + ERROR_LINES
    assert not any(p.is_file() for p in cache.rglob("*")), "a failed build left files"


def test_an_error_in_the_glue_compile_caches_nothing(tmp_path, monkeypatch):
    skip_syntax_check(monkeypatch)
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
