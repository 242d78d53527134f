"""A report as one self-contained HTML page.

:func:`render_html` turns a :class:`~d5core.report.document.ReportDocument` into a page
that needs nothing else to be read: the style is inline, every figure is inline SVG,
and nothing is fetched, so the file opens from disk without a network. Its parts, in
order: a header (title, time, database, selection, d5 version), a warning when the
runs come from more than one machine, the problems met while drawing, the runs (with
links to the trace files of traced runs, written beside the page), one
section per report section with its figures (title, notes, the figure, caption, links
to its PNG and PDF copies, the numbers it draws), and the environment of every run.

Nothing from the store can run in the reader's browser. Every stored string (run
names, tags, errors, recipe values, titles, captions, notes) is escaped; the page holds
no script at all and says so in its Content-Security-Policy; and the SVG that matplotlib
wrote, whose text carries stored strings, is parsed and rewritten by
:func:`sanitize_svg`, which keeps only drawing elements and attributes and only links
inside the figure itself.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any
from urllib.parse import quote

from d5core._version import __version__
from d5core.levels.report import REPORT_SECTIONS, ReportRun
from d5core.report.document import RenderedFigure, ReportDocument
from d5core.report.environment import environment_table, machines_warning, render_environment
from d5core.report.traces import TRACE_SECTION

__all__ = ["CONTENT_SECURITY_POLICY", "SECTION_TITLES", "render_html", "sanitize_svg"]

#: The page's policy: nothing may be loaded or run; only its own inline style and
#: ``data:`` images (a figure's embedded raster) are allowed.
CONTENT_SECURITY_POLICY = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"

#: The headings of d5's own sections (a plugin's section is headed by its name).
SECTION_TITLES: Mapping[str, str] = {
    "operators": "Operators (level 0)",
    "networks": "Networks (level 1)",
    "training": "Training (level 2)",
    "distributed": "Distributed (level 3)",
    "history": "History",
    TRACE_SECTION: "Traces",
}

#: A figure's data shown as JSON is cut at this many characters (the page stays small
#: however many samples a figure draws).
_DATA_CHARS = 60_000
#: Up to this many runs, the runs table is shown whole; beyond, it scrolls.
_RUNS_UNSCROLLED = 25
#: Run ids listed under a figure before the rest are counted.
_FIGURE_RUNS_SHOWN = 12

_SVG_NS = "http://www.w3.org/2000/svg"
_XLINK_NS = "http://www.w3.org/1999/xlink"
_XML_NS = "http://www.w3.org/XML/1998/namespace"

#: The SVG elements a figure may keep: shapes, text, grouping, clipping, gradients and
#: embedded raster images. Anything else (``script``, ``foreignObject``, animation,
#: ``metadata``, elements of other namespaces) is removed with its content; an ``a``
#: becomes a plain group.
_ELEMENTS: frozenset[str] = frozenset(
    {
        "svg",
        "g",
        "defs",
        "path",
        "rect",
        "circle",
        "ellipse",
        "line",
        "polyline",
        "polygon",
        "text",
        "tspan",
        "textPath",
        "clipPath",
        "mask",
        "pattern",
        "marker",
        "symbol",
        "use",
        "image",
        "linearGradient",
        "radialGradient",
        "stop",
        "style",
        "title",
        "desc",
    }
)
_ATTR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]*$")
#: An attribute name that is neither an event handler (``on...``) nor namespaced.
_PLAIN_ATTR = re.compile(r"^(?![oO][nN])[A-Za-z_][A-Za-z0-9_.-]*$")
_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,200}$")
_URL = re.compile(r"url\(\s*(['\"]?)\s*([^)'\"]*?)\s*\1\s*\)", re.IGNORECASE)
_URL_START = re.compile(r"url\s*\(", re.IGNORECASE)
#: Words that never belong in a drawing's attribute or style: script URLs, old IE
#: expressions, and CSS functions that load resources.
_FORBIDDEN_IN_VALUES: tuple[str, ...] = (
    "javascript:",
    "vbscript:",
    "expression(",
    "image-set(",
    "src(",
    "@import",
)
#: A value without any of these is plain data (numbers, colours, font names).
_SUSPECT = re.compile(r"[\\(@]|script:", re.IGNORECASE)
_RASTER = re.compile(r"^data:image/(png|jpeg);base64,[A-Za-z0-9+/=\s]*$")
_DOCTYPE = re.compile(r"<!DOCTYPE[^\[>]*>", re.IGNORECASE)
_XML_DECL = re.compile(r"^\s*<\?xml[^>]*\?>", re.IGNORECASE)
#: What a ``<style>`` inside a figure may contain: plain selectors and declarations.
_STYLE_TEXT = re.compile(r"^[\sA-Za-z0-9_\-*{}:;.,#%()'\"]*$")

_CSS = """
:root { color-scheme: light; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
  color: #1b1b1b; background: #fff; margin: 0 auto; max-width: 1180px; padding: 0 1.2em 3em; }
h1 { font-size: 1.7em; margin: 1em 0 0.3em; }
h2 { font-size: 1.35em; margin: 2em 0 0.6em; border-bottom: 2px solid #0072b2;
  padding-bottom: 0.2em; }
h3 { font-size: 1.1em; margin: 0.2em 0 0.5em; }
dl.meta { display: grid; grid-template-columns: max-content 1fr; gap: 0.15em 1em;
  margin: 0.5em 0 1em; }
dl.meta dt { font-weight: 600; }
dl.meta dd { margin: 0; overflow-wrap: anywhere; }
code { font: 0.92em ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
nav.contents ul { margin: 0.3em 0; padding-left: 1.3em; }
.alert { border: 3px solid #b35900; background: #fff4e0; padding: 0.7em 1em;
  margin: 1em 0; border-radius: 4px; }
.alert strong.label { color: #8a3f00; }
.problems { border: 3px solid #b00020; background: #fdecee; padding: 0.6em 1em;
  margin: 1em 0; border-radius: 4px; }
.problems h2 { border: 0; margin: 0.2em 0; color: #b00020; font-size: 1.2em; }
.problems li { overflow-wrap: anywhere; }
.scroll { overflow: auto; }
.scroll.tall { max-height: 36em; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: left; vertical-align: top; }
thead th { background: #eef3f8; position: sticky; top: 0; }
td.tags span.tag { display: inline-block; background: #e8eef5; border-radius: 3px;
  padding: 0 0.35em; margin: 0 0.2em 0.15em 0; }
figure.d5-figure { margin: 1.2em 0 2.2em; padding: 0.8em 1em 1em; border: 1px solid #d8d8d8;
  border-radius: 6px; }
figure.d5-figure .plot { overflow-x: auto; }
figure.d5-figure .plot svg { max-width: 100%; height: auto; display: block; margin: 0.4em auto; }
figure.d5-figure figcaption { margin: 0.5em 0; }
.note { border-left: 6px solid #d55e00; background: #fff1e6; padding: 0.45em 0.8em;
  margin: 0.5em 0; font-weight: 600; }
.unshown { border: 2px dashed #b00020; padding: 0.6em; color: #b00020; }
.figure-meta { font-size: 0.88em; color: #444; margin: 0.3em 0; overflow-wrap: anywhere; }
details { margin: 0.4em 0; }
details > summary { cursor: pointer; color: #0b5394; }
details pre { max-height: 28em; overflow: auto; background: #f6f8fa; padding: 0.6em;
  font-size: 0.82em; white-space: pre-wrap; overflow-wrap: anywhere; }
.env-table th.env-column { min-width: 11em; }
.env-table .env-machine, .env-table .env-runs { display: block; font-weight: normal;
  font-size: 0.85em; color: #333; }
.env-table tr.env-group th { background: #f3f3f3; }
.env-table td.mark { white-space: nowrap; text-align: center; }
.env-table tr.differs { background: #fff3c4; }
.env-table tr.differs th, .env-table tr.differs td { font-weight: 700; }
.env-table tr.differs td.mark { color: #8a3f00; }
.env-table td, .env-commands td { overflow-wrap: anywhere; max-width: 34em; }
footer { margin-top: 3em; font-size: 0.85em; color: #555; }
@media print { .scroll.tall { max-height: none; } details { display: block; } }
"""


def _e(value: object) -> str:
    """``value`` as text safe in an HTML element or a quoted attribute."""
    return escape(str(value), quote=True)


# -- SVG ------------------------------------------------------------------------------


def _local(tag: str) -> tuple[str | None, str]:
    if tag[0] == "{":
        ns, _, name = tag[1:].partition("}")
        return ns, name
    return None, tag


def _safe_url_refs(value: str, ids: Mapping[str, str]) -> str | None:
    """``value`` with every ``url(#id)`` pointed at the figure's renamed ids; ``None``
    when it refers to anything outside the figure or could load something."""
    if not _SUSPECT.search(value):
        return value  # no url, escape, at-rule or scheme: the common case, kept as it is
    lowered = value.lower()
    if "\\" in value or any(word in lowered for word in _FORBIDDEN_IN_VALUES):
        return None
    if len(_URL_START.findall(value)) != len(_URL.findall(value)):
        return None  # a url( that the pattern does not read: refuse rather than guess
    bad = False

    def swap(match: re.Match[str]) -> str:
        nonlocal bad
        target = match.group(2)
        if not target.startswith("#") or target[1:] not in ids:
            bad = True
            return ""
        return f"url(#{ids[target[1:]]})"

    rewritten = _URL.sub(swap, value)
    return None if bad else rewritten


def _scoped_style(text: str, scope: str, ids: Mapping[str, str]) -> str | None:
    """A figure's ``<style>`` text with every rule limited to the figure (``#scope``);
    ``None`` when it holds anything but plain rules (at-rules, escapes, outside urls)."""
    if not _STYLE_TEXT.match(text) or "@" in text:
        return None
    checked = _safe_url_refs(text, ids)
    if checked is None:
        return None
    rules = []
    for chunk in checked.split("}"):
        if not chunk.strip():
            continue
        selectors, brace, body = chunk.partition("{")
        if not brace or "{" in body:
            return None
        scoped = ", ".join(f"#{scope} {s.strip()}" for s in selectors.split(",") if s.strip())
        rules.append(f"{scoped} {{{body.strip()}}}")
    return " ".join(rules)


def sanitize_svg(markup: str, prefix: str, label: str = "") -> str:
    """The SVG ``markup`` rewritten so that it can be placed in a page safely.

    Only drawing elements are kept (no ``script``, ``foreignObject``, animation or
    foreign namespaces; an ``a`` becomes a group), no attribute named ``on...``, no link
    (``href``, ``url(...)``) but to an element of the same figure, and embedded images
    only as PNG or JPEG ``data:`` URLs. Every ``id`` is prefixed with ``prefix`` so that
    several figures can share a page; a ``<style>`` is limited to the figure. Text is
    written escaped.

    :param prefix: a prefix for the figure's ids (letters, digits and dashes).
    :param label: the figure's accessible name (its title).
    :raises ValueError: when ``markup`` is not well-formed SVG or declares entities.
    """
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9-]*", prefix):
        raise ValueError(f"an SVG id prefix must be letters, digits and dashes, got {prefix!r}")
    text = _DOCTYPE.sub("", _XML_DECL.sub("", markup, count=1), count=1)
    if re.search(r"<!(DOCTYPE|ENTITY)", text, re.IGNORECASE):
        raise ValueError("the SVG declares a DOCTYPE with entities, which a report never takes")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise ValueError(f"the SVG is not well-formed XML ({exc})") from None
    if _local(root.tag) != (_SVG_NS, "svg"):
        raise ValueError(f"the markup's root is {root.tag!r}, not an SVG <svg> element")
    ids: dict[str, str] = {}
    for element in root.iter():
        value = element.get("id")
        if value is not None and _ID.match(value):
            ids[value] = f"{prefix}-{value}"
    scope = f"{prefix}-svg"
    out: list[str] = []
    _write_element(root, out, ids, scope, is_root=True, label=label)
    return "".join(out)


def _clean_attributes(
    element: ET.Element, name: str, ids: Mapping[str, str], scope: str, is_root: bool
) -> list[tuple[str, str]]:
    kept: list[tuple[str, str]] = []
    for key, value in element.attrib.items():
        # the common case: a presentation attribute of no namespace, holding plain data
        plain = key[0] != "{" and key not in ("id", "href") and _PLAIN_ATTR.match(key)
        if plain and not _SUSPECT.search(value):
            kept.append((key, value))
            continue
        ns, attr = _local(key)
        if attr.lower().startswith("on") or not _ATTR_NAME.match(attr):
            continue
        if attr == "href" and ns in (None, _XLINK_NS):
            if value.startswith("#") and value[1:] in ids:
                kept.append(("href", f"#{ids[value[1:]]}"))
            elif name == "image" and _RASTER.match(value):
                kept.append(("href", value))
            continue
        if ns not in (None, _XML_NS):
            continue  # rdf:, sodipodi: and other namespaces' attributes
        if ns == _XML_NS:
            if attr == "space" and value in ("preserve", "default"):
                kept.append(("xml:space", value))
            continue
        if attr == "id":
            if value in ids and not is_root:
                kept.append(("id", ids[value]))
            continue
        checked = _safe_url_refs(value, ids)
        if checked is None:
            continue
        kept.append((attr, checked))
    return kept


def _write_element(
    element: ET.Element,
    out: list[str],
    ids: Mapping[str, str],
    scope: str,
    *,
    is_root: bool = False,
    label: str = "",
) -> None:
    ns, name = _local(element.tag)
    if ns != _SVG_NS:
        return
    if name == "a":
        name = "g"  # keep what a link groups, never the link
    elif name not in _ELEMENTS:
        return
    if name == "style":
        scoped = _scoped_style(element.text or "", scope, ids)
        if scoped:
            out.append(f"<style>{_e(scoped)}</style>")
        return
    attributes = _clean_attributes(element, name, ids, scope, is_root)
    if is_root:
        # The page places and sizes the figure: no style of its own on the outer element.
        attributes = [(k, v) for k, v in attributes if k not in ("role", "aria-label", "style")]
        attributes += [("id", scope), ("role", "img")]
        if label:
            attributes.append(("aria-label", label))
    opening = "<" + name + "".join(f' {key}="{_e(value)}"' for key, value in attributes)
    children = list(element)
    content = element.text or ""
    if not children and not content:
        out.append(opening + "/>")
        return
    out.append(opening + ">")
    if content:
        out.append(_e(content))
    for child in children:
        _write_element(child, out, ids, scope)
        if child.tail:
            out.append(_e(child.tail))
    out.append(f"</{name}>")


# -- the page's parts -------------------------------------------------------------------


def _safe_href(path: str) -> str | None:
    """``path`` as a relative link, or ``None`` when it is absolute. Every character
    that could start a scheme, a query or a fragment is percent-encoded, so the link can
    only ever name a file beside the page."""
    if not path.strip() or path.startswith(("/", "\\")):
        return None
    return quote(path, safe="/._-~")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _header(document: ReportDocument) -> str:
    figures = len(document.figures)
    return (
        f"<header><h1>{_e(document.title)}</h1>"
        '<dl class="meta">'
        f"<dt>Made</dt><dd>{_e(document.created)}</dd>"
        f"<dt>Database</dt><dd><code>{_e(document.database)}</code></dd>"
        f"<dt>Selection</dt><dd><code>{_e(document.selection)}</code></dd>"
        f"<dt>Contents</dt><dd>{_plural(len(document.runs), 'run')}, "
        f"{_plural(figures, 'figure')}</dd>"
        f"<dt>d5 version</dt><dd>{_e(__version__)}</dd>"
        "</dl></header>"
    )


def _machines_alert(runs: Sequence[ReportRun]) -> str:
    warning = machines_warning(runs)
    if warning is None:
        return ""
    return (
        '<div class="alert machines" role="alert"><strong class="label">⚠ Mixed machines.'
        f'</strong> {_e(warning)} See <a href="#environment">the environments</a>.</div>'
    )


def _problems(problems: Sequence[str]) -> str:
    if not problems:
        return ""
    items = "".join(f"<li>{_e(p)}</li>" for p in problems)
    return (
        '<section class="problems" id="problems" role="alert">'
        f"<h2>⚠ {_plural(len(problems), 'problem')} while making this report</h2>"
        f"<ul>{items}</ul></section>"
    )


def _busy_cell(run: ReportRun) -> str:
    """The busy-machine mark of a run's status cell, with its loads as a tooltip; empty
    for a run measured on a quiet machine (or with no load recorded)."""
    from d5core.results.load import BUSY_MARK, run_load_warnings

    found = run_load_warnings(run.record.load_start, run.record.load_end)
    if not found:
        return ""
    return f' <strong class="busy" title="{_e(found[0])}">{_e(BUSY_MARK)}</strong>'


def _runs_table(runs: Sequence[ReportRun]) -> str:
    rows = []
    for run in runs:
        tags = "".join(f'<span class="tag">{_e(tag)}</span>' for tag in run.tags) or "—"
        commit = run.commit
        git = run.environment.get("git")
        dirty = isinstance(git, Mapping) and git.get("dirty") is True
        commit_text = (
            f"<code>{_e(commit[:12])}</code>{' (dirty)' if dirty else ''}" if commit else "—"
        )
        busy = _busy_cell(run)
        rows.append(
            f'<tr id="run-{_e(run.id)}"><td><code>{_e(run.id)}</code></td>'
            f"<td>{_e(run.kind)}</td><td>{_e(run.name)}</td><td>{_e(run.status)}{busy}</td>"
            f'<td>{_e(run.created)}</td><td class="tags">{tags}</td>'
            f"<td>{_e(run.machine)}</td><td>{commit_text}</td></tr>"
        )
    tall = " tall" if len(runs) > _RUNS_UNSCROLLED else ""
    legend = ""
    if any(_busy_cell(run) for run in runs):
        from d5core.results.load import BUSY_LEGEND

        legend = f'<p class="note" role="note">⚠ {_e(BUSY_LEGEND)}</p>'
    return (
        f'<section id="runs"><h2>Runs ({len(runs)})</h2>{legend}'
        f'<div class="scroll{tall}"><table class="runs">'
        "<thead><tr><th>id</th><th>kind</th><th>name</th><th>status</th><th>created</th>"
        "<th>tags</th><th>machine</th><th>commit</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div></section>"
    )


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def _data_view(data: Mapping[str, Any]) -> str:
    """A figure's numbers: a table when they are a flat mapping, JSON otherwise."""
    if data and len(data) <= 40 and all(_is_scalar(v) for v in data.values()):
        rows = "".join(
            f'<tr><th scope="row">{_e(k)}</th><td>{_e(json.dumps(v, default=str))}</td></tr>'
            for k, v in data.items()
        )
        return f'<table class="data">{rows}</table>'
    try:
        text = json.dumps(data, indent=1, default=str)
    except (TypeError, ValueError) as exc:
        text = f"(the data could not be written as JSON: {exc})"
    cut = ""
    if len(text) > _DATA_CHARS:
        cut = (
            f'<p class="figure-meta">Cut at {_DATA_CHARS:,} of {len(text):,} characters; '
            "the figure's files hold the rest of the picture, the store the rest of the "
            "numbers.</p>"
        )
        text = text[:_DATA_CHARS] + "\n…"
    return f"{cut}<pre>{_e(text)}</pre>"


def _file_links(files: Mapping[str, str]) -> str:
    if not files:
        return ""
    order = {"png": 0, "pdf": 1, "svg": 2}
    links = []
    for fmt in sorted(files, key=lambda f: (order.get(f.lower(), 9), f)):
        path = files[fmt]
        href = _safe_href(path)
        if href is None:
            links.append(f"{_e(fmt.upper())}: <code>{_e(path)}</code> (not linked)")
        else:
            links.append(f'<a href="{_e(href)}">{_e(fmt.upper())}</a>')
    return f'<p class="figure-meta files">Files: {" · ".join(links)}</p>'


#: How to open a trace file, said beside every link to one (the page links nothing online).
_TRACE_HOW = (
    "a Chrome trace: open it in Perfetto (ui.perfetto.dev, &ldquo;Open trace file&rdquo;) "
    "or in Chrome or Chromium at chrome://tracing (&ldquo;Load&rdquo;)"
)


def _trace_link(run_id: str, path: str) -> str:
    """One line linking the trace file of ``run_id``, saying how to open it."""
    href = _safe_href(path)
    name = f"<code>{_e(path)}</code>"
    link = f'<a class="trace-link" href="{_e(href)}">{name}</a>' if href else name
    return (
        f'<p class="figure-meta trace" data-run="{_e(run_id)}">Trace of run '
        f"<code>{_e(run_id)}</code>: {link}, {_TRACE_HOW}.</p>"
    )


def _traces_list(traces: Mapping[str, str]) -> str:
    """The runs' trace files, under the runs table; nothing when no run was traced."""
    if not traces:
        return ""
    lines = "".join(_trace_link(run_id, path) for run_id, path in traces.items())
    return (
        f'<section id="traces-files"><h3>Trace files ({len(traces)})</h3>{lines}'
        '<p class="figure-meta">Each file holds every rank and thread of its run on one '
        "time base; the Traces section below draws one step of each.</p></section>"
    )


def _figure(
    rendered: RenderedFigure, number: int, traces: Mapping[str, str] | None = None
) -> tuple[str, str | None]:
    """A figure's HTML and, when its SVG could not be shown, the problem to report.

    :param traces: the trace files of traced runs, by run id: a figure of the
        ``traces`` section links those of the runs it draws.
    """
    fig = rendered.figure
    anchor = f"fig-{fig.key}"
    problem: str | None = None
    try:
        svg = sanitize_svg(rendered.svg, f"f{number}", fig.title)
        plot = f'<div class="plot">{svg}</div>'
    except ValueError as exc:
        problem = f"figure {fig.key} ({rendered.plugin}) could not be shown: {exc}"
        plot = f'<div class="plot unshown">This figure could not be shown: {_e(exc)}</div>'
    notes = "".join(
        f'<p class="note" role="note">⚠ {_e(note)}</p>' for note in fig.notes if str(note).strip()
    )
    caption = f"<figcaption>{_e(fig.caption)}</figcaption>" if fig.caption else ""
    runs = list(fig.runs)
    run_text = ", ".join(_e(r) for r in runs[:_FIGURE_RUNS_SHOWN])
    if len(runs) > _FIGURE_RUNS_SHOWN:
        run_text += f" and {len(runs) - _FIGURE_RUNS_SHOWN} more"
    meta = (
        f'<p class="figure-meta">Drawn by <code>{_e(rendered.plugin)}</code>'
        + (f" from {_plural(len(runs), 'run')}: {run_text}" if runs else "")
        + f' · key <code>{_e(fig.key)}</code> · <a href="#{_e(anchor)}">link</a></p>'
    )
    trace_links = ""
    if traces and fig.section == TRACE_SECTION:
        trace_links = "".join(
            _trace_link(rid, traces[rid]) for rid in dict.fromkeys(runs) if rid in traces
        )
    html = (
        f'<figure class="d5-figure" id="{_e(anchor)}" data-key="{_e(fig.key)}">'
        f"<h3>Figure {number}. {_e(fig.title)}</h3>{notes}{plot}{caption}"
        f"{_file_links(rendered.files)}{trace_links}{meta}"
        f"<details><summary>The numbers drawn</summary>{_data_view(fig.data)}</details>"
        "</figure>"
    )
    return html, problem


def _sections(figures: Iterable[RenderedFigure]) -> list[tuple[str, list[RenderedFigure]]]:
    """Figures by section: d5's sections in their order, then plugins' in first use."""
    grouped: dict[str, list[RenderedFigure]] = {}
    for rendered in figures:
        grouped.setdefault(rendered.figure.section, []).append(rendered)
    ordered = [s for s in REPORT_SECTIONS if s in grouped]
    ordered += [s for s in grouped if s not in REPORT_SECTIONS]
    return [(s, grouped[s]) for s in ordered]


def _section_anchor(section: str, taken: set[str]) -> str:
    if section in REPORT_SECTIONS:
        anchor = f"section-{section}"
    else:
        slug = re.sub(r"[^a-z0-9]+", "-", section.lower()).strip("-") or "plugin"
        anchor = f"section-plugin-{slug[:40]}"
    base, n = anchor, 2
    while anchor in taken:
        anchor = f"{base}-{n}"
        n += 1
    taken.add(anchor)
    return anchor


def render_html(document: ReportDocument) -> str:
    """The report as one self-contained HTML page (see the module's description).

    Sections without figures are left out. A figure whose SVG cannot be made safe is
    shown as a message instead, and listed with the problems at the top.
    """
    taken: set[str] = set()
    body: list[str] = []
    contents: list[str] = []
    problems = list(document.problems)
    number = 0
    for section, figures in _sections(document.figures):
        anchor = _section_anchor(section, taken)
        heading = SECTION_TITLES.get(section, section)
        parts = [f'<section class="report-section" id="{_e(anchor)}"><h2>{_e(heading)}</h2>']
        for rendered in figures:
            number += 1
            html, problem = _figure(rendered, number, document.traces)
            parts.append(html)
            if problem:
                problems.append(problem)
        parts.append("</section>")
        body.append("".join(parts))
        contents.append(
            f'<li><a href="#{_e(anchor)}">{_e(heading)}</a> '
            f"({_plural(len(figures), 'figure')})</li>"
        )
    runs = document.runs
    environment = (
        '<section id="environment"><h2>Environments</h2>'
        f"{render_environment(environment_table(runs))}</section>"
    )
    nav = (
        '<nav class="contents"><strong>Contents</strong><ul>'
        '<li><a href="#runs">Runs</a></li>'
        + "".join(contents)
        + '<li><a href="#environment">Environments</a></li></ul></nav>'
    )
    if not document.figures:
        body.append("<p>No figure was drawn from these runs.</p>")
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_e(CONTENT_SECURITY_POLICY)}">'
        '<meta name="referrer" content="no-referrer">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(document.title)}</title>"
        f"<style>{_CSS}</style></head>\n<body>"
        f"{_header(document)}{_machines_alert(runs)}{_problems(problems)}{nav}"
        f"{_runs_table(runs)}{_traces_list(document.traces)}{''.join(body)}{environment}"
        f"<footer>Made by d5 {_e(__version__)}. This page runs no script and loads "
        "nothing from the network.</footer>"
        "</body></html>\n"
    )
