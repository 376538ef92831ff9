"""Making trace-derived text inert: one function per kind of output.

Kernel, op and annotation names, file names, device names, backends, run
labels and anything read from a saved result are arbitrary strings. Every
reporter and every line the CLI prints passes them through the function of
its output kind; none of them may start markup, a link, an image, an HTML
tag, a GitHub @mention or reference, or a terminal escape sequence.

* :func:`terminal`: a line on stdout or stderr;
* :func:`md_text`: markdown prose and table cells;
* :func:`md_code`: a markdown code span (names shown as code);
* :func:`md_code_block`: a fenced markdown code block;
* :func:`md_html`: text inside raw HTML in markdown (``<summary>...</summary>``);
* :func:`sarif_text`: a SARIF ``message.text`` (GitHub code scanning shows it).

Imports nothing of hta-report's (every layer may use it).
"""
from __future__ import annotations

import html
import re

__all__ = ["visible", "terminal", "md_text", "md_code", "md_code_block", "md_html", "sarif_text"]

#: A word joiner: invisible, and it stops GitHub's filters that run on the
#: rendered text (mentions, issue references, emoji, autolinks).
WJ = "\u2060"

_LINE_BREAKS = re.compile(r"\r\n|[\r\n\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")
_LINE_BREAK_RUNS = re.compile(r"[\r\n\x0b\x0c\x1c-\x1e\x85\u2028\u2029]+")
#: Characters that start inline markup wherever they stand: backslash
#: escapes, code spans, emphasis, strikethrough, links and images, HTML and
#: autolinks, entities, table cells, math, and headings (``#``: text may
#: open a list item's line). CommonMark lets a backslash escape each.
_MD_INLINE = frozenset("\\`*_~[]<>&|$#!")
#: At the start of the text (which may open a list item's line): list
#: markers, thematic breaks, ordered-list numbers (``1.``, ``2)``).
_MD_LEADING = re.compile(r"^(?:[-+=]|[0-9]{1,9}[.)])")
#: Where GitHub's text filters would still act on the rendered (unescaped)
#: text: ``@user``, ``#12``, ``http://``, ``mailto:x``, ``:emoji:``, ``www.``,
#: ``GH-12``. A word joiner goes after the trigger.
_TRIGGERS = re.compile(r"(?:[@#](?=[A-Za-z0-9/])|:(?=[A-Za-z0-9_+/-])|(?i:www)(?=\.)"
                       r"|(?i:(?<![A-Za-z0-9])gh-)(?=[0-9]))")


def visible(text: object, keep_newlines: bool = False) -> str:
    """``text`` with every character that is not printable (C0 and C1
    controls such as ESC and CSI, DEL, line and paragraph separators,
    bidirectional overrides and other format characters, lone surrogates,
    unassigned code points) shown as a Python escape (``\\x1b``, ``\\u202e``).
    ``keep_newlines`` keeps ``\\n`` (other line breaks become ``\\n``)."""
    s = str(text)
    if keep_newlines:
        s = _LINE_BREAKS.sub("\n", s)
    out = []
    for c in s:
        if c.isprintable() or (keep_newlines and c == "\n"):
            out.append(c)
        else:
            out.append(c.encode("unicode_escape", "backslashreplace").decode("ascii"))
    return "".join(out)


def _one_line(text: object) -> str:
    """Line breaks as `` / `` (as in hta-report's one-line errors), the rest :func:`visible`."""
    return visible(_LINE_BREAK_RUNS.sub(" / ", str(text)))


def terminal(text: object) -> str:
    """``text`` for one line of a terminal: no escape sequence can restyle,
    retitle or clear it (see :func:`visible`), and no line break can start a
    line that looks like ours (``\\n`` is shown as ``\\n``)."""
    return visible(text)


def _breaks(text: str) -> str:
    return _TRIGGERS.sub(lambda m: m.group(0) + WJ, text)


def md_text(text: object) -> str:
    """``text`` as inert GitHub-flavoured markdown, for prose and table cells:
    one line (line breaks as `` / ``, other controls :func:`visible`); backslash-escaped, each character that could
    start markup (``\\ ` * _ ~ [ ] < > & | $ # !``, and a list marker or
    ordered-list number at the start): no emphasis, link, image, HTML tag,
    entity, code span, cell break, heading, list or math; leading and
    trailing spaces as ``&#32;`` (no indented code, no hard line break); and
    a word joiner after what GitHub's text filters would turn into a
    mention, a reference, an emoji or a link (``@user``, ``#12``, ``GH-12``,
    ``:name:``, ``http://``, ``www.``). Other punctuation is kept as is, so
    that file names and kernel names stay readable in the raw markdown."""
    s = _breaks(_one_line(text))  # before the backslashes: they would hide what follows a trigger
    s = "".join("\\" + c if c in _MD_INLINE else c for c in s)
    s = _MD_LEADING.sub(lambda m: m.group(0)[:-1] + "\\" + m.group(0)[-1], s)
    core = s.strip(" ")
    if not core:
        return "&#32;" * len(s)
    lead = len(s) - len(s.lstrip(" "))
    trail = len(s) - len(s.rstrip(" "))
    return "&#32;" * lead + core + "&#32;" * trail


def md_code(text: object, table: bool = False) -> str:
    """``text`` as one markdown code span: nothing inside a code span is
    markup, and GitHub's filters skip it. The fence is one backtick more than
    the longest run of backticks in ``text`` (padded with a space when
    ``text`` starts or ends with one); one line (as :func:`md_text`). In a table
    cell (``table``) ``|`` is written ``\\|``, as GitHub's tables require even
    inside code."""
    s = _one_line(text)
    if table:
        s = s.replace("|", "\\|")
    if not s:
        return "` `"
    longest = max((len(run) for run in re.findall(r"`+", s)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if s[0] in "` " or s[-1] in "` " else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def md_code_block(text: object, lang: str = "", indent: str = "") -> str:
    """``text`` as a fenced markdown code block (lines kept, other control
    characters shown escaped), each line prefixed with ``indent``. The fence
    is longer than any run of backticks in ``text``, so nothing inside can
    close it."""
    s = visible(text, keep_newlines=True)
    longest = max((len(run) for run in re.findall(r"`+", s)), default=0)
    fence = "`" * max(3, longest + 1)
    lines = [f"{fence}{lang}"] + s.split("\n") + [fence]
    return "\n".join(indent + line if line else line for line in lines)


def md_html(text: object) -> str:
    """``text`` inside raw HTML of a markdown document (e.g. ``<summary>``,
    where markdown escapes do not apply): one line (as :func:`md_text`),
    HTML-escaped, and a word joiner after what GitHub's text filters act on
    (see :func:`md_text`)."""
    return html.escape(_breaks(_one_line(text)), quote=False)


def sarif_text(text: object) -> str:
    """``text`` as a plain-text SARIF message (``message.text``): one line (as
    :func:`md_text`), ``\\``, ``[`` and ``]`` backslash-escaped (SARIF 2.1.0
    §3.11.6: in plain text they would start an embedded link such as
    ``[text](1)``), and a word joiner after what GitHub's text filters act
    on (see :func:`md_text`)."""
    s = _breaks(_one_line(text))
    return re.sub(r"([\\\[\]])", r"\\\1", s)
