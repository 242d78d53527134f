"""The report page: its structure, its figures inline, its links, and that nothing from
the store can run in the reader's browser (every string escaped, no script, a CSP that
forbids any, SVG sanitised)."""

from __future__ import annotations

import io
import re
from collections.abc import Mapping, Sequence
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from d5core.levels.report import ReportFigure, ReportRun
from d5core.plugins import PluginManager
from d5core.report.document import RenderedFigure, ReportDocument
from d5core.report.html import CONTENT_SECURITY_POLICY, render_html, sanitize_svg
from d5core.report.style import draw_distributions, new_figure
from d5core.results.store import ResultsStore
from d5core.testing.report_runs import report_runs

SCRIPT = "<script>alert(1)</script>"
QUOTES = "he said \"hi\" & 'bye'"
IMG = '"><img src=x onerror=alert(1)>'

CSP_META = (
    '<meta http-equiv="Content-Security-Policy" content="default-src &#x27;none&#x27;; '
    'style-src &#x27;unsafe-inline&#x27;; img-src data:">'
)


class Page(HTMLParser):
    """Every tag with its attributes, and the text, of a page as a browser parses it."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    @property
    def all_text(self) -> str:
        return "".join(self.text)


def assert_nothing_runs(html: str) -> Page:
    """No script element, no event handler, no link out of the page, the CSP in force."""
    page = Page(html)
    assert "<script" not in html.lower()
    for tag, attrs in page.tags:
        assert tag not in ("script", "iframe", "object", "embed", "link", "foreignobject")
        for name, value in attrs.items():
            assert not name.startswith("on"), (tag, name, value)
            if name in ("href", "xlink:href", "src"):
                assert value is not None
                assert name != "src", (tag, value)
                raster = tag == "image" and value.startswith(
                    ("data:image/png;", "data:image/jpeg;")
                )
                assert raster or value.startswith("#") or ":" not in value, (tag, value)
    assert not re.search(r"<[^>]*\son[a-z]+\s*=", html, re.IGNORECASE)
    assert html.count(CSP_META) == 1
    assert html.index(CSP_META) < html.index("<style>")
    return page


def svg_text(figure: Any) -> str:
    """The figure as matplotlib writes an SVG file (declaration and DOCTYPE included)."""
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg")
    return buffer.getvalue()


def drawn_figure(
    key: str,
    section: str,
    *,
    title: str = "a figure",
    label: str = "numpy",
    caption: str = "what it shows",
    notes: Sequence[str] = (),
    data: Mapping[str, Any] | None = None,
    runs: Sequence[str] = (),
) -> ReportFigure:
    fig = new_figure(4, 2.5)
    ax = fig.add_subplot()
    draw_distributions(ax, [(label, [1.0, 1.2, 1.1, 0.9, 1.05, 1.3], (1.07, 0.95, 1.2))])
    ax.set_title(title)
    ax.set_ylabel(label)
    return ReportFigure(
        key=key,
        title=title,
        section=section,
        figure=fig,
        data=dict(data if data is not None else {"samples": [1.0, 1.2], "label": label}),
        runs=tuple(runs),
        caption=caption,
        notes=tuple(notes),
    )


def rendered(figure: ReportFigure, plugin: str = "builtins", **files: str) -> RenderedFigure:
    paths = files or {
        "png": f"report_figures/{figure.key}.png",
        "pdf": f"report_figures/{figure.key}.pdf",
    }
    return RenderedFigure(figure=figure, svg=svg_text(figure.figure), files=paths, plugin=plugin)


def environment(host: str = "node-a", **extra: Any) -> dict[str, Any]:
    return {
        "hostname": host,
        "cpu": {"model": "EPYC", "logical_cores": 4, "flags": ["avx2"]},
        "python": {"version": "3.11.7", "implementation": "CPython"},
        "packages": {"d5core": "0.1.0"},
        "git": {"commit": "c0ffee" * 6 + "abcd", "dirty": True},
        "argv": ["d5", "bench", "op", "Gemm"],
        **extra,
    }


def store_runs(tmp_path: Path, specs: Sequence[dict[str, Any]]) -> list[ReportRun]:
    with ResultsStore.open(tmp_path / "results.sqlite") as store:
        ids = []
        for spec in specs:
            with store.run(
                spec.get("kind", "op"),
                spec.get("name", "bench Gemm"),
                config=spec.get("config", {"op": "Gemm"}),
                environment=spec.get("environment", environment()),
                tags=spec.get("tags", ()),
            ) as run_id:
                for labels in spec.get("measurements", [{"backend": "numpy", "problem": "32x32"}]):
                    store.add_measurement(
                        run_id,
                        "time",
                        [1e-3, 1.2e-3, 1.1e-3, 0.9e-3, 1.05e-3, 1.3e-3, 1.01e-3],
                        labels={"dtype": "float32", "direction": "forward", **labels},
                    )
            ids.append(run_id)
        return report_runs(store, ids)


def document(
    runs: Sequence[ReportRun], figures: Sequence[RenderedFigure], **fields: Any
) -> ReportDocument:
    values: dict[str, Any] = {
        "title": "d5 report: test",
        "created": "2026-01-01T00:00:00+00:00",
        "database": "/tmp/results.sqlite",
        "selection": "--last 3",
        "runs": tuple(runs),
        "figures": tuple(figures),
        "problems": (),
    }
    values.update(fields)
    return ReportDocument(**values)


def figure_blocks(html: str) -> dict[str, str]:
    """``key -> the <figure> element's markup``."""
    return dict(
        re.findall(
            r'<figure class="d5-figure" id="[^"]*" data-key="([^"]*)">(.*?)</figure>', html, re.S
        )
    )


# -- structure ---------------------------------------------------------------------------


def test_sections_follow_the_report_order_and_empty_ones_are_left_out(tmp_path: Path) -> None:
    runs = store_runs(tmp_path, [{}])
    figures = [
        rendered(drawn_figure("history-gemm", "history", title="over time")),
        rendered(drawn_figure("mine-extra", "my plugin's", title="plugin view"), plugin="mine"),
        rendered(drawn_figure("op-samples-gemm", "operators", title="samples")),
        rendered(drawn_figure("net-steps-mlp", "networks", title="steps")),
        rendered(drawn_figure("op-roofline", "operators", title="roofline")),
    ]
    html = render_html(document(runs, figures))
    sections = re.findall(r'<section class="report-section" id="([^"]+)"><h2>([^<]*)</h2>', html)
    assert sections == [
        ("section-operators", "Operators (level 0)"),
        ("section-networks", "Networks (level 1)"),
        ("section-history", "History"),
        ("section-plugin-my-plugin-s", "my plugin&#x27;s"),
    ]
    assert "section-training" not in html and "section-distributed" not in html
    # Figures keep their order within a section and are numbered down the page.
    headings = re.findall(r"<h3>Figure (\d+)\. ([^<]*)</h3>", html)
    assert headings == [
        ("1", "samples"),
        ("2", "roofline"),
        ("3", "steps"),
        ("4", "over time"),
        ("5", "plugin view"),
    ]
    # The contents link every section shown, with its figure count.
    assert '<a href="#section-operators">Operators (level 0)</a> (2 figures)' in html
    assert '<a href="#section-plugin-my-plugin-s">my plugin&#x27;s</a> (1 figure)' in html
    assert html.startswith("<!DOCTYPE html>")
    assert_nothing_runs(html)


def test_every_figure_is_inline_svg_with_its_files_caption_notes_and_data(tmp_path: Path) -> None:
    runs = store_runs(tmp_path, [{}])
    one = drawn_figure(
        "op-samples-gemm",
        "operators",
        title="Gemm samples",
        caption="boxes span the quartiles",
        notes=("drawn from runs of 2 different machines (a: 1 run; b: 1 run)",),
        data={"median": 1.07, "backend": "numpy", "n": 6},
        runs=[runs[0].id],
    )
    two = drawn_figure(
        "net-steps-mlp", "networks", title="MLP steps", data={"samples": {"numpy": [1.0, 2.0]}}
    )
    html = render_html(
        document(runs, [rendered(one), rendered(two, png="my report_figures/x#1.png")])
    )
    blocks = figure_blocks(html)
    assert set(blocks) == {"op-samples-gemm", "net-steps-mlp"}
    assert html.count("<svg") == 2 == html.count("</svg>")
    for key, block in blocks.items():
        assert block.count("<svg") == 1, key
        assert 'role="img"' in block
    first = blocks["op-samples-gemm"]
    assert 'aria-label="Gemm samples"' in first
    assert ">Gemm samples</text>" in first  # the title matplotlib drew, as SVG text
    # The note is shown before the figure, as a warning.
    note = '<p class="note" role="note">⚠ drawn from runs of 2 different machines'
    assert note in first and first.index(note) < first.index("<svg")
    assert "<figcaption>boxes span the quartiles</figcaption>" in first
    assert '<a href="report_figures/op-samples-gemm.png">PNG</a>' in first
    assert '<a href="report_figures/op-samples-gemm.pdf">PDF</a>' in first
    assert f"from 1 run: {runs[0].id}" in first
    # A flat mapping of numbers is a table; nested data is JSON.
    assert "<details><summary>The numbers drawn</summary><table" in first
    assert '<th scope="row">median</th><td>1.07</td>' in first
    second = blocks["net-steps-mlp"]
    assert "<pre>{\n &quot;samples&quot;: {\n  &quot;numpy&quot;: [\n   1.0," in second
    # File names are percent-encoded: a space or a '#' cannot change what is linked.
    assert '<a href="my%20report_figures/x%231.png">PNG</a>' in second
    assert_nothing_runs(html)


def test_the_ids_of_each_figure_are_its_own(tmp_path: Path) -> None:
    runs = store_runs(tmp_path, [{}])
    figures = [rendered(drawn_figure(f"op-{i}", "operators")) for i in range(3)]
    html = render_html(document(runs, figures))
    ids = re.findall(r'\sid="([^"]+)"', html)
    assert len(ids) == len(set(ids)), [i for i in ids if ids.count(i) > 1][:5]
    # Every in-figure reference points at an id of the same figure.
    for n, block in enumerate(figure_blocks(html).values(), start=1):
        block_ids = set(re.findall(r'\sid="([^"]+)"', block))
        refs = re.findall(r'href="#([^"]+)"', block) + re.findall(r"url\(#([^)]+)\)", block)
        refs = [r for r in refs if not r.startswith("fig-")]
        assert refs, "matplotlib's clip paths and markers are referenced"
        assert all(ref.startswith(f"f{n}-") and ref in block_ids for ref in refs)


def test_a_large_data_block_is_cut_and_says_so(tmp_path: Path) -> None:
    runs = store_runs(tmp_path, [{}])
    big = drawn_figure("op-big", "operators", data={"samples": [0.123456789] * 20000})
    html = render_html(document(runs, [rendered(big)]))
    assert "Cut at 60,000 of" in html
    assert len(html) < 400_000


def test_runs_table_and_header_show_what_the_report_holds(tmp_path: Path) -> None:
    runs = store_runs(
        tmp_path,
        [{"tags": ["baseline", "v2"]}, {"kind": "net", "name": "bench mlp", "config": {}}],
    )
    html = render_html(document(runs, [], selection="--kind op --tag baseline"))
    rows = re.findall(r'<tr id="run-([0-9a-f]+)">(.*?)</tr>', html)
    assert [r[0] for r in rows] == [r.id for r in runs]
    first = rows[0][1]
    cells = re.findall(r"<td[^>]*>(.*?)</td>", first)
    assert cells[1:4] == ["op", "bench Gemm", "complete"]
    assert '<span class="tag">baseline</span><span class="tag">v2</span>' in first
    assert "node-a (EPYC)" in first
    assert "<code>c0ffeec0ffee</code> (dirty)" in first
    assert "<dd><code>--kind op --tag baseline</code></dd>" in html
    assert "2 runs, 0 figures" in html
    assert "No figure was drawn from these runs." in html
    assert '<section id="environment"><h2>Environments</h2>' in html


def test_problems_are_shown_in_a_box_at_the_top(tmp_path: Path) -> None:
    runs = store_runs(tmp_path, [{}])
    figures = [rendered(drawn_figure("op-x", "operators"))]
    problems = ("plugin 'mine' failed to draw its figures (RuntimeError: boom); they are left out",)
    html = render_html(document(runs, figures, problems=problems))
    box = re.search(r'<section class="problems" id="problems" role="alert">(.*?)</section>', html)
    assert box is not None
    assert "1 problem while making this report" in box.group(1)
    assert "plugin &#x27;mine&#x27; failed to draw its figures" in box.group(1)
    assert html.index('id="problems"') < html.index('id="runs"') < html.index("<svg")
    assert 'id="problems"' not in render_html(document(runs, figures))


# -- environments and machines --------------------------------------------------------------


def test_mixed_machines_are_warned_about_at_the_top(tmp_path: Path) -> None:
    runs = store_runs(
        tmp_path,
        [{"environment": environment("node-a")}, {"environment": environment("node-b")}],
    )
    html = render_html(document(runs, [rendered(drawn_figure("op-x", "operators"))]))
    alert = re.search(r'<div class="alert machines" role="alert">(.*?)</div>', html)
    assert alert is not None
    assert "2 different machines" in alert.group(1)
    assert "node-a (EPYC): 1 run" in alert.group(1) and "node-b (EPYC): 1 run" in alert.group(1)
    assert html.index("alert machines") < html.index('id="runs"')
    # ... and the environment table marks the host as a difference.
    host = re.search(r'<tr class="differs"><th scope="row">host</th>(.*?)</tr>', html)
    assert host is not None and "≠ differs" in host.group(1)

    same = store_runs(tmp_path / "same", [{}, {}])
    page = render_html(document(same, []))
    assert "alert machines" not in page and 'class="differs"' not in page


# -- nothing from the store runs ------------------------------------------------------------


def test_hostile_strings_in_every_field_are_shown_as_text(tmp_path: Path) -> None:
    hostile_env = environment(
        host=SCRIPT,
        argv=["d5", IMG],
        threads={"OMP_NUM_THREADS": QUOTES},
        frameworks={"x:y": {"version": IMG}},
    )
    runs = store_runs(
        tmp_path,
        [
            {"name": SCRIPT, "tags": [QUOTES, IMG], "environment": hostile_env,
             "config": {"op": SCRIPT}, "measurements": [{"backend": IMG, "problem": QUOTES}]},
            {"kind": SCRIPT, "name": IMG},
        ],
    )  # fmt: skip
    fig = drawn_figure(
        "op-hostile",
        SCRIPT,
        title=SCRIPT + QUOTES,
        label=IMG,
        caption=IMG + QUOTES,
        notes=(SCRIPT,),
        data={SCRIPT: IMG, "nested": {QUOTES: [SCRIPT]}},
        runs=[SCRIPT],
    )
    page_doc = document(
        runs,
        [
            rendered(fig, plugin=SCRIPT, png=IMG, pdf="javascript:alert(1)"),
            # A plugin's figure whose SVG itself carries scripts and handlers.
            RenderedFigure(drawn_figure("mine-svg", "operators"), HOSTILE_SVG, {}, "mine"),
        ],
        title=SCRIPT,
        created=QUOTES,
        database=IMG,
        selection=SCRIPT + QUOTES,
        problems=(SCRIPT, IMG),
    )
    html = render_html(page_doc)
    page = assert_nothing_runs(html)
    text = page.all_text
    # Each string reads back as the same text in the page...
    for value in (SCRIPT, QUOTES, IMG, SCRIPT + QUOTES):
        assert value in text, value
    # ... because it was escaped wherever it went.
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "he said &quot;hi&quot; &amp; &#x27;bye&#x27;" in html
    assert "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;" in html
    assert "<img" not in html
    assert "evil" not in html and "<foreignObject" not in html
    # The figure's own SVG text (title and tick label) is escaped too.
    block = figure_blocks(html)["op-hostile"]
    svg = block[block.index("<svg") : block.index("</svg>")]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;he said" in svg
    # Links to files stay relative: a scheme in a stored path is percent-encoded.
    hrefs = [attrs.get("href") for tag, attrs in page.tags if tag == "a"]
    assert "javascript%3Aalert%281%29" in hrefs
    assert all(h and (h.startswith("#") or ":" not in h) for h in hrefs)


def test_a_report_built_from_the_store_shows_hostile_names_as_text(
    tmp_path: Path, d5_plugin_manager: PluginManager
) -> None:
    """d5's own build (the builtins plugin draws the operator figures) with a run named
    ``<script>alert(1)</script>`` and a tag with quotes."""
    from d5core.report.build import build_report

    with ResultsStore.open(tmp_path / "results.sqlite") as store:
        with store.run(
            "op", SCRIPT, config={"op": SCRIPT}, environment=environment(), tags=[QUOTES]
        ) as run_id:
            for backend in ("numpy", IMG):
                store.add_measurement(
                    run_id,
                    "time",
                    [1e-3, 1.2e-3, 1.1e-3, 0.9e-3, 1.05e-3, 1.3e-3, 1.01e-3],
                    labels={"backend": backend, "problem": "32x32", "dtype": "float32",
                            "direction": "forward"},
                )  # fmt: skip
        report = build_report(
            store,
            [store.get_run(run_id)],
            output=tmp_path / "report.html",
            selection=f"--tag {QUOTES}",
            manager=d5_plugin_manager,
            formats=("png",),
            jobs=1,
        )
    assert report.figures, report.problems
    html = render_html(report)
    page = assert_nothing_runs(html)
    assert SCRIPT in page.all_text and QUOTES in page.all_text
    assert '<span class="tag">he said &quot;hi&quot; &amp; &#x27;bye&#x27;</span>' in html
    blocks = figure_blocks(html)
    assert len(blocks) == len(report.figures)
    assert all(block.count("<svg") == 1 for block in blocks.values())
    # The stored strings reached the SVG's text, escaped.
    assert any(
        "&lt;script&gt;alert(1)&lt;/script&gt;" in b[b.index("<svg") :] for b in blocks.values()
    )
    for figure in report.figures:
        assert (tmp_path / figure.files["png"]).is_file()
        assert f'<a href="{figure.files["png"]}">PNG</a>' in html


# -- the SVG sanitiser -----------------------------------------------------------------------

HOSTILE_SVG = """<?xml version="1.0"?>
<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink"
     xmlns:ev="http://www.w3.org/2001/xml-events" width="10pt" height="10pt" onload="alert(1)"
     style="position: fixed; top: 0; left: 0; width: 100vw; height: 100vh">
 <script>alert(1)</script>
 <style>*{stroke-linejoin: round} @import url(http://evil/x.css);</style>
 <defs><clipPath id="p1"><rect x="0" y="0" width="5" height="5"/></clipPath>
   <path id="m1" d="M 0 0 L 1 1"/></defs>
 <g id="g1" clip-path="url(#p1)" onclick="alert(2)" ev:event="click" OnMouseOver="alert(3)">
  <use xlink:href="#m1" x="1"/>
  <use href="http://evil/sprite.svg#a"/>
  <use xlink:href="#missing"/>
  <path d="M 0 0" style="fill: url(http://evil/x)"/>
  <path d="M 1 1" fill="url(#p1)" style="fill: #ffffff"/>
  <rect width="1" height="1" style="background: image-set('http://evil/a.png' 1x)"/>
  <a xlink:href="javascript:alert(4)"><text x="0" y="0">click &lt;me&gt;</text></a>
  <foreignObject><div xmlns="http://www.w3.org/1999/xhtml" onclick="alert(5)">x</div></foreignObject>
  <set attributeName="onmouseover" to="alert(6)"/>
  <animate attributeName="href" values="javascript:alert(7)"/>
  <image href="data:image/png;base64,iVBORw0KGgo=" width="1" height="1"/>
  <image href="data:image/svg+xml;base64,PHN2Zz48L3N2Zz4=" width="1" height="1"/>
  <image xlink:href="http://evil/track.png" width="1" height="1"/>
 </g>
</svg>"""


def test_the_sanitiser_keeps_the_drawing_and_drops_everything_active() -> None:
    out = sanitize_svg(HOSTILE_SVG, "f7", "hostile")
    page = Page(out)
    tags = [tag for tag, _ in page.tags]
    for gone in ("script", "foreignobject", "set", "animate", "a", "div"):
        assert gone not in tags, gone
    attrs = [(tag, name, value) for tag, a in page.tags for name, value in a.items()]
    assert not [a for a in attrs if a[1].startswith("on") or a[1].startswith("ev:")]
    assert "alert" not in out and "evil" not in out and "javascript" not in out
    assert "position" not in out  # the outer element cannot cover the page
    # What draws is kept, renamed into the figure's own ids.
    assert '<g id="f7-g1" clip-path="url(#f7-p1)">' in out
    assert '<use href="#f7-m1" x="1"/>' in out
    assert '<path d="M 1 1" fill="url(#f7-p1)" style="fill: #ffffff"/>' in out
    assert '<clipPath id="f7-p1">' in out
    assert '<g><text x="0" y="0">click &lt;me&gt;</text></g>' in out  # a link becomes a group
    assert '<image href="data:image/png;base64,iVBORw0KGgo=" width="1" height="1"/>' in out
    assert out.count("<image") == 3 and out.count('href="data:') == 1
    # The root gets the figure's id and name; a <style> with an at-rule is dropped whole.
    assert out.startswith(
        '<svg width="10pt" height="10pt" id="f7-svg" role="img" aria-label="hostile">'
    )
    assert "<style>" not in out


def test_a_plain_style_is_kept_but_limited_to_its_figure() -> None:
    svg = (
        '<svg xmlns="http://www.w3.org/2000/svg"><defs><style type="text/css">'
        "*{stroke-linejoin: round; stroke-linecap: butt}</style></defs><path d='M 0 0'/></svg>"
    )
    out = sanitize_svg(svg, "f2")
    assert "<style>#f2-svg * {stroke-linejoin: round; stroke-linecap: butt}</style>" in out


@pytest.mark.parametrize(
    ("markup", "message"),
    [
        ("<svg xmlns='http://www.w3.org/2000/svg'><g></svg>", "not well-formed"),
        ("<html><body/></html>", "not an SVG <svg> element"),
        ("<svg><g/></svg>", "not an SVG <svg> element"),  # no SVG namespace
        (
            '<!DOCTYPE svg [<!ENTITY a "aaaa">]><svg xmlns="http://www.w3.org/2000/svg">'
            "<text>&a;</text></svg>",
            "entities",
        ),
    ],
)
def test_markup_that_is_not_plain_svg_is_refused(markup: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        sanitize_svg(markup, "f1")


def test_a_figure_whose_svg_is_refused_is_replaced_by_a_message(tmp_path: Path) -> None:
    runs = store_runs(tmp_path, [{}])
    good = rendered(drawn_figure("op-good", "operators"))
    fig = drawn_figure("op-bad", "operators", title="broken")
    bad = RenderedFigure(fig, "<svg><script>alert(1)</script>", {"png": "x.png"}, "mine")
    html = render_html(document(runs, [good, bad]))
    blocks = figure_blocks(html)
    assert "This figure could not be shown" in blocks["op-bad"] and "<svg" not in blocks["op-bad"]
    assert blocks["op-good"].count("<svg") == 1
    assert "figure op-bad (mine) could not be shown" in html  # listed with the problems
    assert_nothing_runs(html)


def test_the_policy_forbids_every_load_and_script() -> None:
    assert CONTENT_SECURITY_POLICY == (
        "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
    )
