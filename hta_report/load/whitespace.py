"""JSON text with its runs of whitespace cut short: memory that follows a trace's
content, not its bytes.

A valid trace can hold gigabytes of whitespace between or inside its events: a
3.4 MB ``.json.gz`` inflates to 3.5 GB of spaces inside ``{"traceEvents": [ ... ]}``.
Whitespace outside strings means nothing in JSON, so the readers
(:mod:`.fastparse` when a block holds no event boundary, :mod:`.hta_parser`
for large files) pass such text through a :class:`Collapser`, which keeps the
first byte of each run of whitespace outside strings and drops the rest, one
chunk at a time: what it returns parses to the same value, and is at most
about twice as long as the text without its whitespace.
"""
from __future__ import annotations

import numpy as np

#: byte -> whether it is JSON whitespace (space, tab, CR, LF)
IS_WHITESPACE = np.zeros(256, dtype=bool)
IS_WHITESPACE[list(b" \t\r\n")] = True
_WS = b" \t\r\n"
_QUOTE, _BACKSLASH = 0x22, 0x5C


class Collapser:
    """Cuts each run of JSON whitespace outside strings down to its first byte,
    over a text fed chunk by chunk (:meth:`feed`); the text must start outside
    any string. State carried between chunks: inside a string or not, whether
    the last byte was such whitespace, the run of backslashes the last chunk
    ended with (an escaped quote may straddle two chunks).
    """

    def __init__(self) -> None:
        self.in_string = False
        self.after_ws = False
        self.backslashes = 0

    def feed(self, chunk: bytes) -> bytes:
        """The next chunk with whitespace runs (outside strings, across chunks)
        cut to their first byte; ``chunk`` itself when nothing is cut. Costs
        a few passes of numpy over the chunk (~120 MB/s; a chunk of
        whitespace alone: one ``bytes.translate``, ~3 GB/s)."""
        n = len(chunk)
        if not n:
            return chunk
        if not self.in_string and not chunk.translate(None, _WS):  # only whitespace
            out = b"" if self.after_ws else bytes(chunk[:1])
            self.after_ws, self.backslashes = True, 0
            return out
        a = np.frombuffer(chunk, dtype=np.uint8)
        quotes = np.flatnonzero(a == _QUOTE)
        if len(quotes):  # a quote after an odd run of backslashes is escaped
            before = a[np.maximum(quotes - 1, 0)] == _BACKSLASH
            before[quotes == 0] = self.backslashes > 0
            real = np.ones(len(quotes), dtype=bool)
            for i in np.flatnonzero(before):
                p = int(quotes[i]) - 1
                while p >= 0 and a[p] == _BACKSLASH:
                    p -= 1
                run = int(quotes[i]) - 1 - p + (self.backslashes if p < 0 else 0)
                real[i] = run % 2 == 0
            quotes = quotes[real]
        toggles = np.zeros(n, dtype=np.uint8)
        toggles[quotes] = 1
        # inside[i]: inside a string after byte i (an opening quote is inside, a closing one outside)
        inside = np.bitwise_xor.accumulate(toggles).view(bool)
        if self.in_string:
            inside = ~inside
        ws = IS_WHITESPACE[a] & ~inside
        drop = ws.copy()
        drop[1:] &= ws[:-1]
        drop[0] &= self.after_ws
        self.in_string, self.after_ws = bool(inside[-1]), bool(ws[-1])
        if a[-1] == _BACKSLASH:
            others = np.flatnonzero(a != _BACKSLASH)
            tail = n - 1 - int(others[-1]) if len(others) else n
            self.backslashes = tail + (self.backslashes if tail == n else 0)
        else:
            self.backslashes = 0
        if not drop.any():
            return chunk
        return a[~drop].tobytes()
