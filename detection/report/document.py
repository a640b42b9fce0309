"""The report as data, and its two renderers: a `Document` is a title and `Section`s (tables, lines of text, figures),
built once by report.writer from the runs; `render_markdown` and `render_html` write it, each in one place. Cells
are text or an `Estimate` (a mean with its interval), which each renderer writes its own way."""

from __future__ import annotations

import html
import math
import re
from dataclasses import dataclass

__all__ = ["Estimate", "Table", "Section", "Document", "render_markdown", "render_html", "markdown_table",
           "html_table", "csv_cell", "fmt"]


def fmt(v, nd=1) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{nd}f}"


@dataclass(frozen=True)
class Estimate:
    """A group's metric in a table: the mean with its 95% interval over units, or ± sd, or alone. Text in Markdown,
    CSV and JSON ("69.5 [67.9, 71.1]"); in HTML the interval goes under the mean, smaller, so a table of 16 columns
    fits a 1280-px window."""

    mean: float | None
    interval: tuple[float, float] | None = None
    sd: float | None = None
    of: str = ""  # " (2 of 3 runs)" when the metric is missing (or not finite) in some of the row's runs

    def __str__(self) -> str:
        return fmt(self.mean) + self._spread()

    def _spread(self) -> str:
        if self.interval is not None:
            return f" [{fmt(self.interval[0])}, {fmt(self.interval[1])}]{self.of}"
        return (f" ± {fmt(self.sd)}" if self.sd is not None else "") + self.of

    def html(self) -> str:
        spread = self._spread().strip()
        return html.escape(fmt(self.mean)) + (f'<br/><span class="spread">{html.escape(spread)}</span>'
                                              if spread else "")


@dataclass(frozen=True)
class Table:
    """head and rows of cells; wrap: text cells that may wrap (config values, paths), not numbers that must not."""

    head: list
    rows: list
    wrap: bool = False


@dataclass(frozen=True)
class Section:
    """A titled part of the report: its `intro` (the sentences of what was found: a list set larger, above
    everything else), its tables, then its lines of text (a bulleted list when `bullets`), then its figures as (PNG
    file in the report's directory, caption)."""

    title: str
    tables: tuple[Table, ...] = ()
    lines: tuple[str, ...] = ()
    figures: tuple[tuple[str, str], ...] = ()
    bullets: bool = False
    intro: tuple[str, ...] = ()


@dataclass(frozen=True)
class Document:
    title: str
    sections: tuple[Section, ...]


def _md(text) -> str:
    """Text from runs, names or titles as Markdown shows it: HTML escaped (Markdown passes raw HTML through)."""
    return html.escape(str(text), quote=False)


def markdown_table(head, rows) -> str:
    def cell(c) -> str:
        return _md(c).replace("|", "\\|")

    lines = ["| " + " | ".join(map(cell, head)) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(map(cell, r)) + " |" for r in rows]
    return "\n".join(lines)


def _header_html(h) -> str:
    """A column header that may wrap only between words: after a space, and after the _ or / inside a run name
    ("vgg16_bn_gn_scratch" breaks after "gn_", never inside "scratch")."""
    return re.sub(r"([_/])", r"\1<wbr/>", html.escape(str(h)))


def html_table(head, rows, *, wrap: bool = False) -> str:
    th = "".join(f"<th>{_header_html(h)}</th>" for h in head)
    trs = "".join("<tr>" + "".join(f"<td>{c.html() if isinstance(c, Estimate) else html.escape(str(c))}</td>"
                                   for c in r) + "</tr>" for r in rows)
    attrs = ' class="text"' if wrap else ""
    return f"<table{attrs}><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>"


def csv_cell(c):
    """A spreadsheet runs a cell that starts with = + - @ (or a tab / CR) as a formula: such text gets a leading
    quote; numbers (-2.40) stay numbers."""
    if isinstance(c, str) and c[:1] in ("=", "+", "-", "@", "\t", "\r"):
        try:
            float(c)
        except ValueError:
            return "'" + c
    return c


def _section_markdown(s: Section) -> str:
    intro = "".join(f"- {_md(n)}\n" for n in s.intro) + ("\n" if s.intro else "")
    tables = "".join(f"{markdown_table(t.head, t.rows)}\n\n" for t in s.tables)
    lines = ("".join(f"- {_md(n)}\n" for n in s.lines) + "\n" if s.bullets and s.lines
             else "".join(f"{_md(n)}\n\n" for n in s.lines))
    return (f"## {_md(s.title)}\n\n{intro}{tables}{lines}"
            + "".join(f"![{_md(cap)}]({f})\n\n" for f, cap in s.figures))


def render_markdown(doc: Document) -> str:
    return f"# {_md(doc.title)}\n\n" + "".join(_section_markdown(s) for s in doc.sections)


def _table_html(t: Table) -> str:
    return html_table(t.head, t.rows, wrap=t.wrap)


def _section_html(s: Section) -> str:
    lines = ("<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in s.lines) + "</ul>" if s.bullets
             else "".join(f"<p>{html.escape(n)}</p>" for n in s.lines))
    intro = ('<ul class="headline">' + "".join(f"<li>{html.escape(n)}</li>" for n in s.intro) + "</ul>"
             if s.intro else "")
    return (f"<h2>{html.escape(s.title)}</h2>{intro}" + "".join(_table_html(t) for t in s.tables) + lines
            + "".join(f'<figure><img src="{f}" alt="{html.escape(cap)}"/><figcaption>{html.escape(cap)}'
                      "</figcaption></figure>" for f, cap in s.figures))


STYLE = ("body{font-family:sans-serif;margin:1em 1.5em}"
         # numbers never wrap ("18.2 ± 0.1" on one line), headers may: the main table fits a 1280-px window
         "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #999;padding:2px 5px;"
         "text-align:right}td{white-space:nowrap}th{vertical-align:bottom}.spread{font-size:11px;color:#555}"
         "td:first-child,th:first-child{text-align:left}"  # names read from the left
         # config values and paths wrap anywhere: the table of what differs fits the window too
         "table.text td{white-space:normal;overflow-wrap:anywhere;text-align:left}"
         "table.text td:first-child{white-space:nowrap}"
         # the result sentences: what a reader came for, above the table
         "ul.headline{font-size:15px;line-height:1.35;padding-left:1.2em;margin:0.4em 0 0.8em}"
         "ul.headline li{margin-bottom:0.3em}figure{margin:0.8em 0}figcaption{font-size:13px;color:#333}"
         "img{max-width:100%}")


def render_html(doc: Document) -> str:
    return ('<!DOCTYPE html>\n<html xmlns="http://www.w3.org/1999/xhtml" lang="en"><head><meta charset="utf-8"/>'
            f"<title>{html.escape(doc.title)}</title><style>{STYLE}</style></head><body>"
            f"<h1>{html.escape(doc.title)}</h1>{''.join(_section_html(s) for s in doc.sections)}</body></html>\n")
