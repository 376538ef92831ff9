"""The figures a report page shows, by label, and its headings' lists: what
``tests/test_page_invariants.py`` checks on every page (issue 55, item 4).

A page is read as text lines: markdown as written, the terminal summary as
printed, HTML turned into the same shape (:func:`html_lines`: headings
``## x``, list items ``- x``, table rows ``| a | b |``, other text as lines).

A figure is a percentage (``41.4 %``) and its label:

- in a table, the column's header, for the row named by its first cell;
- in prose, the one to five words right before it, back to the line's
  start, a ``( , ; : ·`` or the figure before (``GPU busy 41.4 %``, ``host ops 57.0 %``; not
  ``(57.0 % of the step)``, which names no label), for the rank a line
  starts with (``rank 3: ...``), else for the whole page.

Labels are compared in lower case with "synchronization" read as "sync"
and "GPU" left out ("GPU busy" and "busy" are one label), so that a page
cannot dodge the check by spelling a word two ways. On a page of one rank,
that rank's rows are the page's own figures.
"""
from __future__ import annotations

import collections
import re
from html.parser import HTMLParser
from typing import Dict, List, NamedTuple, Tuple

#: Words read alike in labels (a page may not show "sync 0.0 %" beside "synchronization 1.2 %").
SAME_WORD = {"synchronization": "sync", "synchronizations": "sync", "synchronize": "sync"}
#: Words that do not tell two figures apart ("GPU busy" is "busy").
NO_WORD = {"gpu", "the", "a", "an", "and"}
_PCT = r"(-?\d+(?:\.\d+)?)\s?%"
_PROSE = re.compile(r"(?:^|(?<=[(·,;:%]))\s*((?:[A-Za-z][\w'/.-]*\s+){0,4}[A-Za-z][\w'/-]*)\s" + _PCT)
_CELL = re.compile(r"\**" + _PCT + r"\**")
_RANK_LINE = re.compile(r"(?:[-*]\s+)?rank (\d+)[:,]")


class Figure(NamedTuple):
    label: str   #: the normalised label (:func:`label`)
    scope: str   #: whose figure: "" (the page), "rank N", or a table row's first cell
    text: str    #: the number as shown ("41.4")
    line: str    #: the line it is on, for the message


def label(words: str) -> str:
    """A label in the form figures are compared by (see the module's docstring)."""
    out = [SAME_WORD.get(w, w) for w in re.findall(r"[a-z][\w'/-]*", words.lower())]
    return " ".join(w for w in out if w not in NO_WORD)


def figures(lines: List[str], one_rank: bool) -> List[Figure]:
    """Every labelled percentage of a page's ``lines`` (see the module's docstring).
    ``one_rank``: the page covers one rank, whose rows are the page's own figures."""
    out: List[Figure] = []
    header: List[str] = []
    section, level = "", 0  # the rank a heading or a <summary> names ("rank 0"), else "", and its heading level

    def page_scope(scope: str) -> str:
        return "" if one_rank and re.fullmatch(r"(rank )?\d+", scope) else scope

    for raw in lines:
        line = raw.replace("\u00a0", " ").strip()
        heading = len(line) - len(line.lstrip("#")) if re.match(r"#+ ", line) else 0
        if heading or line.startswith("<summary>"):
            m = re.search(r"\brank (\d+)\b(?! →)", line, re.I)
            if m:  # a rank's own section: its figures are that rank's, until a heading as high
                section, level = f"rank {m.group(1)}", heading or 99
            elif heading and heading <= level:
                section, level = "", 0
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if not header:
                header = cells
                continue
            if all(re.fullmatch(r":?-+:?", c) for c in cells if c):
                continue
            key = page_scope(cells[0].strip("_*"))
            scope = f"{section} / {key}" if section and not one_rank else key
            for head, cell in zip(header[1:], cells[1:]):
                m = _CELL.fullmatch(cell)
                if m and label(head):
                    out.append(Figure(label(head), page_scope(scope), m.group(1), raw))
            continue
        header = []
        m = _RANK_LINE.match(line)
        scope = page_scope(f"rank {m.group(1)}" if m else section)
        for m in _PROSE.finditer(line.replace("*", "").replace("`", "").replace("_", " ")):
            if label(m.group(1)):
                out.append(Figure(label(m.group(1)), scope, m.group(2), raw))
    return out


def _decimals(text: str) -> int:
    return len(text.split(".")[1]) if "." in text else 0


def disagreements(figs: List[Figure]) -> List[Tuple[str, str, str, str, str]]:
    """Pairs of figures with the same label and scope that differ by more
    than their rounding (``57 %`` and ``57.0 %`` agree; ``1.2 %`` and
    ``0.0 %`` do not): ``(label, a, b, line of a, line of b)``."""
    groups: Dict[Tuple[str, str], List[Figure]] = collections.defaultdict(list)
    for f in figs:
        groups[(f.label, f.scope)].append(f)
    bad = []
    for (name, _), fs in groups.items():
        for a in fs:
            b = next((b for b in fs if abs(float(a.text) - float(b.text))
                      > 0.5 * 10 ** -min(_decimals(a.text), _decimals(b.text)) + 1e-9), None)
            if b is not None:
                bad.append((name, a.text, b.text, a.line.strip()[:200], b.line.strip()[:200]))
                break
    return bad


def heading_then_empty_list(lines: List[str]) -> List[str]:
    """Headings (``#``...) followed, after blank lines, by the next heading
    of the same or a higher level, or by the end: a heading whose list is
    empty. A line ending in ``:`` followed by nothing, or by a blank line
    and then no list item, counts too (a list announced and not given)."""
    bad = []
    for i, line in enumerate(lines):
        rest = [x for x in lines[i + 1:] if x.strip()]
        if line.startswith("#") and line.lstrip("#").startswith(" "):
            level = len(line) - len(line.lstrip("#"))
            if not rest or (rest[0].startswith("#") and len(rest[0]) - len(rest[0].lstrip("#")) <= level
                            and rest[0].lstrip("#").startswith(" ")):
                bad.append(line)
        elif line.rstrip().endswith(":") and not line.lstrip().startswith(("|", "-", "#", "```", "<")) \
                and not rest:
            bad.append(line)
    return bad


class _Lines(HTMLParser):
    """HTML as lines of the markdown shape (see :func:`html_lines`)."""

    BLOCK = {"p", "div", "section", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "summary", "details",
             "ul", "ol", "table", "thead", "tbody", "pre", "figure", "figcaption", "br", "header", "footer"}
    SKIP = {"script", "style", "svg", "title", "head", "pre"}  # pre: code, whose "# ..." lines are comments

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.lines: List[str] = []
        self.cur = ""
        self.cells: List[str] = []
        self.in_cell = False
        self.skip = 0

    def _flush(self) -> None:
        if self.cur.strip():
            self.lines.append(re.sub(r"\s+", " ", self.cur).strip())
        self.cur = ""

    def handle_starttag(self, tag, attrs):
        if tag == "img":  # an image is content: a heading over charts heads a list
            self._flush()
            self.lines.append(f"[image: {dict(attrs).get('alt') or ''}]")
        elif tag in self.SKIP:
            self.skip += 1
        elif tag in ("td", "th"):
            self.in_cell = True
            self.cells.append("")
        elif tag in self.BLOCK:
            self._flush()
            if tag.startswith("h") and tag[1:].isdigit():
                self.cur = "#" * int(tag[1:]) + " "
            elif tag == "li":
                self.cur = "- "
            elif tag == "summary":
                self.cur = "<summary> "
            if tag == "tr":
                self.cells = []

    def handle_endtag(self, tag):
        if tag in self.SKIP:
            self.skip = max(0, self.skip - 1)
        elif tag in ("td", "th"):
            self.in_cell = False
        elif tag == "tr":
            self.lines.append("| " + " | ".join(re.sub(r"\s+", " ", c).strip() for c in self.cells) + " |")
            self.cells = []
        elif tag == "table":
            self.lines.append("")
        elif tag in self.BLOCK:
            self._flush()

    def handle_data(self, data):
        if self.skip:
            return
        if self.in_cell:
            self.cells[-1] += data
        else:
            self.cur += data


def html_lines(page: str) -> List[str]:
    """An HTML page as text lines: ``## heading``, ``- item``, ``| cell | cell |``
    (a blank line after each table), other text one line per block; scripts,
    styles and SVG left out."""
    p = _Lines()
    p.feed(page)
    p._flush()
    return p.lines
