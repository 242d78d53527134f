"""Test sessions: d5core alone, each plugin in its own virtualenv, integration, lint, types.

Plugins with conflicting pins never share an environment here: each ``plugin`` session
installs d5core and that one plugin. ``make test`` runs every session and then sums the
JUnit reports written to ``.reports/`` (``.ci/junit_summary.py``), where a skip for a
module that the session has installed counts as a failure.
"""

from __future__ import annotations

from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
REPORTS = ROOT / ".reports"
TORCH = "torch==2.13.0"
PLUGINS = sorted(p.parent.name for p in (ROOT / "plugins").glob("*/pyproject.toml"))
#: Extra requirements a plugin's environment needs pinned before the plugin resolves its
#: own dependencies (so that pip never picks a multi-gigabyte build).
PINS: dict[str, list[str]] = {
    "d5-plugin-torch": [TORCH],
    "d5-plugin-torchdist": [TORCH],
    # MXNet 1.9.1 fails inside its own import beside numpy 1.24 or later.
    "d5-plugin-mxnet": ["mxnet==1.9.1", "numpy==1.23.5"],
}
#: Other d5 plugins a plugin's own tests need beside it (the TensorFlow plugin's level-3
#: test trains over MPI ranks through d5-plugin-mpi's allreduce scheme).
COMPANIONS: dict[str, list[str]] = {
    "d5-plugin-tensorflow": ["d5-plugin-mpi"],
    "d5-plugin-mxnet": ["d5-plugin-mpi"],
    "d5-plugin-jax": ["d5-plugin-mpi"],
    # the gloo engine's ranks run d5-plugin-mpi's schemes; its tests start mpiexec too
    "d5-plugin-torchdist": ["d5-plugin-mpi"],
}
#: Tests a plugin's session runs besides the plugin's own: the MXNet session is the one
#: environment with numpy 1.23, where d5core and the reference backend must work too.
ALSO_TESTS: dict[str, list[str]] = {
    "d5-plugin-mxnet": ["tests/core", "plugins/d5-plugin-numpy/tests"],
}
#: The reference backend: every other plugin's tests validate against it.
REFERENCE = "d5-plugin-numpy"
#: Plugins that share the integration environment (and `make dev`'s .venv).
SHARED = [
    "d5-plugin-numpy",
    "d5-plugin-torch",
    "d5-plugin-onnxruntime",
    "d5-plugin-mpi",
    "d5-plugin-tensorflow",
    "d5-plugin-jax",
    "d5-plugin-torchdist",
]

nox.options.sessions = [
    "core",
    "plugin",
    "mxnet-beside-numpy2",
    "kernels",
    "example",
    "integration",
    "lint",
    "types",
]
nox.options.error_on_external_run = True


def pytest(session: nox.Session, name: str, *args: str) -> None:
    """Run pytest, writing a JUnit report; an empty collection (exit 5) is reported, not
    mistaken for a crash, and the summary of ``make test`` counts it as zero tests.

    Next to the report goes the list of modules importable in the session
    (``<name>.modules.txt``): the summary fails a skip for a module the session has."""
    REPORTS.mkdir(exist_ok=True)
    session.run("python", str(ROOT / ".ci" / "lane_modules.py"), f"{REPORTS / name}.modules.txt")
    code = session.run(
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--junitxml={REPORTS / name}.xml",
        *args,
        success_codes=[0, 5],
    )
    if code == 5:
        session.warn(f"{name}: pytest collected no tests")


@nox.session
def core(session: nox.Session) -> None:
    """d5core alone, with no plugin installed; with psycopg, so that the results store's
    tests run on PostgreSQL too (on a private cluster; see d5core/testing/postgres.py)."""
    session.install("-e", ".[test,postgres]")
    pytest(session, "core", "tests/core")


@nox.session
@nox.parametrize("plugin", PLUGINS)
def plugin(session: nox.Session, plugin: str) -> None:
    """One plugin in its own virtualenv (with the reference backend), with its own tests."""
    also = ALSO_TESTS.get(plugin, [])
    reference = (
        []
        if plugin == REFERENCE
        else ["-e", f"plugins/{REFERENCE}[test]" if also else f"plugins/{REFERENCE}"]
    )
    companions = [arg for name in COMPANIONS.get(plugin, []) for arg in ("-e", f"plugins/{name}")]
    # a session that runs tests/core runs the store's tests on PostgreSQL too (psycopg)
    core = ".[test,postgres]" if also else "."
    session.install(
        *PINS.get(plugin, []), "-e", core, *reference, *companions, "-e", f"plugins/{plugin}[test]"
    )
    pytest(session, f"plugin-{plugin}", f"plugins/{plugin}/tests", *also)


@nox.session(name="mxnet-beside-numpy2")
def mxnet_beside_numpy2(session: nox.Session) -> None:
    """The MXNet plugin installed, against its advice, beside numpy 2 (``--no-deps``):
    it must refuse to load with one line naming the fix, and leave every other plugin
    working."""
    session.install("-e", ".[test]", "-e", f"plugins/{REFERENCE}")
    session.install("--no-deps", "mxnet==1.9.1", "-e", "plugins/d5-plugin-mxnet")
    pytest(session, "mxnet-beside-numpy2", "plugins/d5-plugin-mxnet/tests_numpy2")


@nox.session
def kernels(session: nox.Session) -> None:
    """d5-kernels, the native C++ backend, built from source with build isolation, beside
    d5core and the numpy reference it is validated against, and the ``bench`` extra
    (torch, threadpoolctl) its benchmark scripts' tests run."""
    session.install("-e", ".[test]", "-e", f"plugins/{REFERENCE}", "./kernels[test,bench]")
    pytest(session, "kernels", "kernels/tests")


@nox.session
def example(session: nox.Session) -> None:
    """The plugins of docs/plugins (the template and the worked example) and the example
    third-party plugin, as their authors test them next to d5's reference backend; and the
    code that docs/plugins shows (tests/docs)."""
    session.install(
        "-e",
        ".",
        "-e",
        f"plugins/{REFERENCE}",
        "./tests/example_plugin[test]",
        "./docs/plugins/template[test]",
        "./docs/plugins/worked_example[test]",
        "./docs/plugins/algorithm_example[test]",
    )
    pytest(
        session,
        "example",
        "tests/example_plugin/tests",
        "docs/plugins/template/tests",
        "docs/plugins/worked_example/tests",
        "docs/plugins/algorithm_example/tests",
        "tests/docs",
    )


@nox.session
def integration(session: nox.Session) -> None:
    """Every shareable plugin together, broken fixture plugins, the d5 command end to end
    (with psycopg: the many-writers test writes to PostgreSQL as well as SQLite)."""
    pins = list(dict.fromkeys(pin for name in SHARED for pin in PINS.get(name, [])))
    # the numpy glue's headers: the custom-operator tests build C++ operators end to end
    plugins = [f"plugins/{name}[customop]" if name == "d5-plugin-numpy" else f"plugins/{name}"
               for name in SHARED]  # fmt: skip
    session.install(*pins, "-e", ".[test,hf,postgres]", *plugins)
    pytest(session, "integration", "tests/integration")


#: ``make dev``'s environment: the shareable plugins with their frameworks, and the pinned
#: ruff and mypy. The static checks run there, so that CI neither downloads them again nor
#: keeps a fourth copy of torch and TensorFlow on its disk.
DEV_BIN = ROOT / ".venv" / "bin"


def dev_tool(session: nox.Session, tool: str) -> str:
    """The path of ``tool`` in ``make dev``'s environment; the session fails in one line
    naming the fix when that environment has not been made."""
    path = DEV_BIN / tool
    if not path.exists():
        session.error(f"{path} is missing: run `make dev` first (it installs {tool})")
    return str(path)


@nox.session(venv_backend="none")
def lint(session: nox.Session) -> None:
    """ruff over the whole repository, with the ruff ``make dev`` pins."""
    session.run(dev_tool(session, "ruff"), "check", ".", external=True)


@nox.session(venv_backend="none")
def types(session: nox.Session) -> None:
    """mypy, strict, over d5core, d5's plugins and the plugins of docs/plugins (the files
    of pyproject.toml's ``[tool.mypy]``), in ``make dev``'s environment: the shareable
    plugins are installed there with their frameworks, so that they are checked against
    the frameworks' own types."""
    session.run(dev_tool(session, "mypy"), external=True)
