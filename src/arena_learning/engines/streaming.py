"""Streaming an answer while it is decoded: the pieces that are safe to show before the end."""

from __future__ import annotations


class TextStream:
    """Turns a growing output (bytes so far) into text pieces that are safe to show before the end.

    A piece never holds what may become a stop string (the longest end of the output that begins
    one waits), nor half a UTF-8 character; with ``strip`` (an answer the engine strips), leading
    whitespace is dropped and trailing whitespace waits for more text. So the pieces shown are
    always the start of the final text, and ``rest`` completes it.
    """

    def __init__(self, stops: list[bytes], strip: bool = False):
        self.stops = [s for s in stops if s]
        self.strip = strip
        self.shown = ""

    def feed(self, output: bytes) -> str:
        """Return the new text that can be shown, given the whole output so far."""
        held = 0
        for stop in self.stops:
            for k in range(min(len(stop) - 1, len(output)), held, -1):
                if output.endswith(stop[:k]):
                    held = k
                    break
        safe = output[: len(output) - held]
        # Cut an unfinished UTF-8 character: a lead byte with fewer continuation bytes than it needs.
        for back in range(1, min(4, len(safe)) + 1):
            byte = safe[-back]
            if byte & 0xC0 == 0x80:
                continue
            need = 2 if byte & 0xE0 == 0xC0 else 3 if byte & 0xF0 == 0xE0 else 4 if byte & 0xF8 == 0xF0 else 1
            if need > back:
                safe = safe[:-back]
            break
        text = safe.decode("utf-8", errors="ignore")
        if self.strip:
            text = text.strip()
        if not text.startswith(self.shown):
            return ""
        delta, self.shown = text[len(self.shown):], text
        return delta

    def rest(self, final: str) -> str:
        """Return what remains of the final text after the pieces shown."""
        return final[len(self.shown):] if final.startswith(self.shown) else ""
