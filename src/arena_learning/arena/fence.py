"""Answer text is data, not instructions.

Each piece of user or assistant text goes into the judge prompt between
markers ``<<<NAME id>>>`` and ``<<<END NAME id>>>``. The id is a hash of all the
texts of the prompt, so an answer cannot know it in advance and so cannot close
its own fence; marker-like runs inside a text are broken up (``<<<`` becomes
``<< <``) so a text cannot even look like a fence. The id is deterministic, so
the same battle gives the same prompt and the ledger still caches it.

Answers that try to talk to the judge are flagged in the judgment record;
the judge's system prompt tells it to count such attempts against the answer.
"""

from __future__ import annotations

import hashlib
import re

_MARKERS = re.compile(r"(<{3,}|>{3,})")
_INJECTION = re.compile(
    r"ignore (?:all |any |the )?(?:previous|above|prior|earlier|preceding)"
    r"|disregard (?:all |any |the )?(?:previous|above|prior|instructions)"
    r"|(?:new|updated) instructions?\s*:"
    r"|you are (?:now )?(?:the|a) judge"
    r"|as the judge,? you"
    r"|(?:give|assign|award|rate) (?:answer|assistant|response) ?[ab12]?\b.{0,20}\b(?:10|ten|a (?:perfect|higher) score)"
    r"|score_[ab]\s*[\"']?\s*[:=]"
    r"|\[\[\s*\d+\s*\]\]"
    r"|^\s*(?:system|judge)\s*:",
    re.I | re.M,
)


def fence_id(*texts: str) -> str:
    """Return the 10-hex-digit id that marks the fences of one judge prompt."""
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode("utf-8"))
        h.update(b"\x00")
    return h.hexdigest()[:10]


def sanitize(text: str) -> str:
    """Return ``text`` with marker-like runs broken up."""
    return _MARKERS.sub(lambda m: " ".join(m.group(0)), text)


def fence(name: str, text: str, fid: str) -> str:
    """Return ``text`` between the markers of ``name``."""
    return f"<<<{name} {fid}>>>\n{sanitize(text)}\n<<<END {name} {fid}>>>"


def injection_flags(text: str) -> list[str]:
    """Return why ``text`` looks like it addresses the judge (empty when it does not)."""
    flags = []
    if _MARKERS.search(text):
        flags.append("fence-markers")
    m = _INJECTION.search(text)
    if m:
        flags.append(f"instructions-to-judge: {m.group(0).strip()[:40]!r}")
    return flags
