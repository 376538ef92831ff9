"""Making trace-derived text inert: one function per kind of output.

Kernel, op and annotation names, file names, device names, backends, run
labels and anything read from a saved result are arbitrary strings. Every
reporter and every line the CLI prints passes them through the function of
its output kind; none of them may start markup, a link, an image, an HTML
tag, a GitHub @mention or reference, or a terminal escape sequence.

* :func:`terminal`: a line on stdout or stderr;
* :func:`md_text`: markdown prose;
* :func:`md_code`: a markdown code span: kernel, op, device and file names,
  any identifier a reader may copy (nothing is added inside a code span, so
  what is copied is the name: ``grep`` finds it);
* :func:`md_cell`: prose in a markdown table cell; every table cell is cut
  at :data:`MD_CELL_MAX` characters (:func:`clip`; ``md_code(..., table=True)`` too);
* :func:`md_code_block`: a fenced markdown code block;
* :func:`md_html`: text inside raw HTML in markdown (``<summary>...</summary>``);
* :func:`sarif_text`: a SARIF ``message.text`` (GitHub code scanning shows it);
* :func:`html_text`: any value written into the HTML report (jinja2 escapes
  the markup characters, this the invisible and control ones);
* :func:`is_image_data_uri`: whether an image source is one of our charts;
* :func:`redact_url`: the logins and secret query parameters of URLs in a text as ``***``.

Imports nothing of hta-report's (every layer may use it).
"""
from __future__ import annotations

import html
import re
import unicodedata

__all__ = ["visible", "terminal", "md_text", "md_code", "md_cell", "clip", "MD_CELL_MAX", "MD_FIELD_MAX",
           "md_code_block", "md_html",
           "sarif_text", "html_text", "is_image_data_uri", "redact_url"]

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
#: ``GH-12``. A word joiner goes after the trigger, and only there: a colon
#: opens an emoji only when a name and another colon follow, a scheme only
#: before ``//`` (or after ``mailto``, ``xmpp``), and ``#`` a reference only
#: before a digit, so that ``aten::add``, ``gloo:all_reduce``,
#: ``Optimizer.step#AdamW.step`` and ``cuda:0`` in prose stay as written.
_TRIGGERS = re.compile(r"(?:@(?=[A-Za-z0-9/._+-])|#(?=[0-9]|$)|:(?=//|[A-Za-z0-9_+-]+:)"
                       r"|(?:(?<=[Mm][Aa][Ii][Ll][Tt][Oo])|(?<=[Xx][Mm][Pp][Pp])):(?=[A-Za-z0-9])"
                       r"|(?i:www)(?=\.)|(?i:(?<![A-Za-z0-9])gh-)(?=[0-9]))")
#: A text that ends in ``:name``, which the text after it (``: reason``) would
#: close into an emoji: a word joiner goes at its end (a name searched for
#: in the copied line is still found in it).
_OPEN_EMOJI_END = re.compile(r":[A-Za-z0-9_+-]+$")
#: The longest text a markdown table cell shows (characters, before escaping):
#: longer text is cut (:func:`clip`), ending in "…"; the HTML report shows it whole.
MD_CELL_MAX = 200
#: The longest text any other markdown field shows (characters, before
#: escaping): a device, kernel, op or file name, a run label, a reason, one
#: line of prose. Longer text is cut (:func:`clip`), ending in "…", by
#: :func:`md_text`, :func:`md_code` and :func:`md_html`, so that one field
#: (a 70 KB device name) cannot spend a pull-request comment's 65,536
#: characters before the findings; the HTML report and the JSON keep it whole.
MD_FIELD_MAX = 1000


def visible(text: object, keep_newlines: bool = False, keep_spaces: bool = False) -> str:
    """``text`` with every character that is not printable (C0 and C1
    controls such as ESC and CSI, DEL, line and paragraph separators,
    bidirectional overrides and other format characters, lone surrogates,
    unassigned code points) shown as a Python escape (``\\x1b``, ``\\u202e``).
    ``keep_newlines`` keeps ``\\n`` (other line breaks become ``\\n``);
    ``keep_spaces`` keeps tabs and the space separators (no-break and thin
    spaces, Unicode category Zs)."""
    s = str(text)
    if keep_newlines:
        s = _LINE_BREAKS.sub("\n", s)
    out = []
    for c in s:
        if c.isprintable() or (keep_newlines and c == "\n") or (
                keep_spaces and (c == "\t" or unicodedata.category(c) == "Zs")):
            out.append(c)
        else:
            out.append(c.encode("unicode_escape", "backslashreplace").decode("ascii"))
    return "".join(out)


#: A chart as :mod:`hta_report.render.charts` draws it: base64 SVG data, nothing to fetch.
_IMAGE_DATA_URI = re.compile(r"data:image/svg\+xml;base64,[A-Za-z0-9+/]*={0,2}")


def is_image_data_uri(text: object) -> bool:
    """Whether ``text`` is a chart image we draw (``data:image/svg+xml;base64,…``):
    the only image source a report may hold (a cached or edited one that
    names a URL would be a beacon in a report that loads nothing)."""
    return isinstance(text, str) and _IMAGE_DATA_URI.fullmatch(text) is not None


def html_text(value: object) -> object:
    """A value about to be written into the HTML report (jinja2's
    ``finalize``, before autoescaping): a string that is not already markup
    gets :func:`visible`, keeping ``\\n``, tabs and spaces (no-break ones
    included), so no terminal control, bidi
    override or zero-width character reaches the page (``cat`` or ``less -R``
    of the report would run it; U+202E reorders names in the browser).
    Markup (our own, e.g. :func:`~hta_report.render.html.breakable`'s) and
    other values are returned unchanged."""
    if isinstance(value, str) and not hasattr(value, "__html__"):
        return value if value.isprintable() else visible(value, keep_newlines=True, keep_spaces=True)
    return value


def _one_line(text: object) -> str:
    """Line breaks as `` / `` (as in hta-report's one-line errors), the rest :func:`visible`."""
    return visible(_LINE_BREAK_RUNS.sub(" / ", str(text)))


def terminal(text: object) -> str:
    """``text`` for one line of a terminal: no escape sequence can restyle,
    retitle or clear it (see :func:`visible`), and no line break can start a
    line that looks like ours (``\\n`` is shown as ``\\n``)."""
    return visible(text)


def _breaks(text: str) -> str:
    s = _TRIGGERS.sub(lambda m: m.group(0) + WJ, text)
    return s + WJ if _OPEN_EMOJI_END.search(s) else s


def md_text(text: object) -> str:
    """``text`` as inert GitHub-flavoured markdown, for prose (in a table
    cell: :func:`md_cell`); names a reader may copy go in code spans
    (:func:`md_code`) instead:
    one line (line breaks as `` / ``, other controls :func:`visible`); backslash-escaped, each character that could
    start markup (``\\ ` * _ ~ [ ] < > & | $ # !``, and a list marker or
    ordered-list number at the start): no emphasis, link, image, HTML tag,
    entity, code span, cell break, heading, list or math; leading and
    trailing spaces as ``&#32;`` (no indented code, no hard line break); and
    a word joiner after what GitHub's text filters would turn into a
    mention, a reference, an emoji or a link (``@user``, ``#12``, ``GH-12``,
    ``:name:``, ``http://``, ``www.``; nowhere else, see :data:`_TRIGGERS`).
    Other punctuation is kept as is, so that file names and kernel names
    stay readable in the raw markdown. Cut at :data:`MD_FIELD_MAX`
    characters first (:func:`clip`)."""
    s = _breaks(clip(text, MD_FIELD_MAX))  # before the backslashes: they would hide what follows a trigger
    s = "".join("\\" + c if c in _MD_INLINE else c for c in s)
    s = _MD_LEADING.sub(lambda m: m.group(0)[:-1] + "\\" + m.group(0)[-1], s)
    core = s.strip(" ")
    if not core:
        return "&#32;" * len(s)
    lead = len(s) - len(s.lstrip(" "))
    trail = len(s) - len(s.rstrip(" "))
    return "&#32;" * lead + core + "&#32;" * trail


def clip(text: object, limit: int = MD_CELL_MAX) -> str:
    """``text`` on one line (as :func:`md_text`) cut to at most ``limit``
    characters, the last one "…"; unchanged when it fits. The one cut of a
    markdown table cell (:data:`MD_CELL_MAX`)."""
    s = _one_line(text)
    return s if len(s) <= limit else s[: max(limit - 1, 0)] + "…"


def md_cell(text: object) -> str:
    """Prose in a markdown table cell: :func:`md_text` of ``text`` cut at
    :data:`MD_CELL_MAX` characters (:func:`clip`)."""
    return md_text(clip(text))


def md_code(text: object, table: bool = False) -> str:
    """``text`` as one markdown code span: nothing inside a code span is
    markup, GitHub's filters skip it, and nothing is added to it (no word
    joiner), so that the name copied from the rendered comment is the name.
    The fence is one backtick more than the longest run of backticks in
    ``text`` (CommonMark: a run of another length cannot close it; padded
    with a space when ``text`` starts or ends with a backtick or a space,
    which CommonMark strips); one line (as :func:`md_text`). In a table cell
    (``table``) the text is cut at :data:`MD_CELL_MAX` characters
    (:func:`clip`) and ``|`` is written ``\\|``, as GitHub's tables require
    even inside code; elsewhere at :data:`MD_FIELD_MAX` (the start of a cut
    name still finds it)."""
    s = clip(text, MD_FIELD_MAX)
    if table:
        s = clip(s).replace("|", "\\|")
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
    (see :func:`md_text`); cut at :data:`MD_FIELD_MAX` characters first."""
    return html.escape(_breaks(clip(text, MD_FIELD_MAX)), quote=False)


def sarif_text(text: object) -> str:
    """``text`` as a plain-text SARIF message (``message.text``): one line (as
    :func:`md_text`), ``\\``, ``[`` and ``]`` backslash-escaped (SARIF 2.1.0
    §3.11.6: in plain text they would start an embedded link such as
    ``[text](1)``), and a word joiner after what GitHub's text filters act
    on (see :func:`md_text`)."""
    s = _breaks(_one_line(text))
    return re.sub(r"([\\\[\]])", r"\\\1", s)


#: A URL's login: ``scheme://user:password@`` (up to the last ``@`` before
#: the path, query or fragment; RFC 3986 §3.2.1).
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#\s]*@")
#: A query parameter whose value is a secret: presigned URLs' signatures,
#: credentials and tokens (S3's ``X-Amz-*``, ``AWSAccessKeyId`` and
#: ``Signature``, GCS's ``X-Goog-*`` and ``GoogleAccessId``, Azure SAS's
#: ``sig``), OAuth and API tokens and keys, passwords. The value ends at the
#: next parameter, fragment, space or quote; punctuation before a space or the
#: end (``?sig=abc: cannot read``) is the text's, not the value's.
_URL_SECRET_PARAM = re.compile(
    r"(?i)([?&;](?:x-amz-[a-z0-9-]*|x-goog-[a-z0-9-]*|sig|key|pwd|pass|auth"
    r"|[a-z0-9_.-]*(?:signature|credential|token|secret|passw|api[-_]?key|access[-_]?key|access[-_]?id"
    r"|private[-_]?key|auth)[a-z0-9_.-]*)=)(?:[^&;#\s'\"<>,:.)\]]|[,:.)\]](?!\s|$))*")
#: What a secret is replaced with.
REDACTED = "***"


def redact_url(text: object) -> str:
    """``text`` with the secrets of every URL in it replaced by ``***``: the
    login (``http://alice:s3cr3t@host/`` -> ``http://***@host/``, in a chained
    URL such as ``zip://x::s3://...`` too) and the value of each query parameter
    that carries a signature, a credential, a token, a key or a password
    (``?X-Amz-Signature=***``, ``&sig=***``, ``&token=***``). The rest stays,
    so that the location remains recognizable. For every place a location
    given by the user is shown or stored: a report, a saved result, a message."""
    s = str(text)
    if "@" in s:
        s = _URL_USERINFO.sub(lambda m: m.group(1) + REDACTED + "@", s)
    if "=" in s:
        s = _URL_SECRET_PARAM.sub(lambda m: m.group(1) + REDACTED, s)
    return s
