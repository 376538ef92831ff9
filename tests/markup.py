"""What markdown and terminal output would turn into, for tests (not shipped).

Markdown is rendered with ``cmarkgfm``, the bindings to GitHub's own fork of
cmark (tables, autolinks, strikethrough; raw HTML passed through, as GitHub
passes it to its sanitizer), and the HTML is inspected: which tags it holds,
which links and images, and what GitHub's text filters would act on in the
text outside code (``@mentions``, ``#12`` references, emoji shortcodes, bare
URLs). Terminal text is inspected for control characters.
"""
from __future__ import annotations

import collections
import re
from html.parser import HTMLParser
from typing import Counter, List, Tuple

import cmarkgfm
from cmarkgfm.cmark import Options

#: What GitHub's filters turn into mentions, references, emoji or links when
#: they see it in rendered text (outside code).
GITHUB_TEXT_TRIGGERS = re.compile(
    r"(?<![A-Za-z0-9_`])@[A-Za-z0-9]"           # @user, @org/team
    r"|(?<![A-Za-z0-9_&])#[0-9]"                 # #12, owner/repo#12
    r"|(?i:(?<![A-Za-z0-9])gh-[0-9])"            # GH-12
    r"|:[A-Za-z0-9_+-]+:"                        # :emoji:
    r"|[A-Za-z][A-Za-z0-9+.-]*://"               # scheme://
    r"|(?i:mailto:|xmpp:)[A-Za-z0-9]"
    r"|(?i:(?<![A-Za-z0-9])www\.)"
    r"|[A-Za-z0-9._%+-]@[A-Za-z0-9-]+\.[A-Za-z]"  # e-mail
)
#: Control characters a terminal acts on: C0 (but newline), DEL, C1.
TERMINAL_CONTROLS = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")


class _Walker(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: Counter[str] = collections.Counter()
        self.links: List[Tuple[str, str]] = []
        self.text: List[str] = []
        self._code = 0

    def handle_starttag(self, tag, attrs):
        self.tags[tag] += 1
        if tag in ("code", "pre"):
            self._code += 1
        for name, value in attrs:
            if name in ("href", "src", "srcset", "action", "formaction", "background", "poster"):
                self.links.append((tag, value or ""))

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag in ("code", "pre"):
            self._code -= 1

    def handle_endtag(self, tag):
        if tag in ("code", "pre"):
            self._code = max(0, self._code - 1)

    def handle_data(self, data):
        if not self._code:
            self.text.append(data)


def render_gfm(md: str) -> str:
    """``md`` rendered as GitHub renders a comment (before its sanitizer)."""
    return cmarkgfm.github_flavored_markdown_to_html(md, options=Options.CMARK_OPT_UNSAFE)


def inspect_markdown(md: str) -> _Walker:
    """The rendered ``md``'s tags (counts), links/images and text outside code."""
    w = _Walker()
    w.feed(render_gfm(md))
    w.close()
    return w


def markdown_problems(md: str, benign: str) -> List[str]:
    """What hostile text made of ``md``, against ``benign``, the same document
    rendered with harmless text: tags, links or images beyond the benign
    one's, text GitHub would turn into a mention, reference, emoji or link,
    and control characters."""
    w, b = inspect_markdown(md), inspect_markdown(benign)
    problems = []
    extra = w.tags - b.tags
    if extra:
        problems.append(f"markup made by the text: {dict(extra)}")
    problems += [f"{tag} to {url!r}" for tag, url in w.links if (tag, url) not in b.links]
    found = collections.Counter(m.group(0) for m in GITHUB_TEXT_TRIGGERS.finditer("".join(w.text)))
    found -= collections.Counter(m.group(0) for m in GITHUB_TEXT_TRIGGERS.finditer("".join(b.text)))
    problems += [f"GitHub would act on {t!r}" for t in found]
    if TERMINAL_CONTROLS.search(md.replace("\n", "")):
        problems.append("control characters in the markdown")
    return problems


def terminal_problems(text: str, lines: int) -> List[str]:
    """What hostile text made of terminal output expected to hold ``lines`` lines."""
    problems = []
    if TERMINAL_CONTROLS.search(text.replace("\n", "")):
        problems.append(f"control characters: {TERMINAL_CONTROLS.findall(text.replace(chr(10), ''))!r}")
    if re.search("[\u2028\u2029\u0085\u202a-\u202e\u2066-\u2069]", text):
        problems.append("line separators or bidirectional overrides")
    if text.count("\n") != lines - 1 + text.endswith("\n"):
        problems.append(f"{text.count(chr(10)) + 1 - text.endswith(chr(10))} lines instead of {lines}")
    return problems
