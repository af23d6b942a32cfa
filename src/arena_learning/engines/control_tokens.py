"""Text from answers and data files must never become a model's control tokens.

An in-process engine tokenises the prompt it renders. llama-cpp-python parses special-token
text in a string prompt (``special=True``), so an answer that contains ``<end_of_turn>`` or
``<|im_start|>`` would end the judge's turn, or open a new system turn, for real. Two guards:

- completion mode: the engine tokenises the prompt itself with ``special=False`` (every string
  is plain text; the BOS token is added by the library), so nothing in it is a control token
  and the text reaches the model unchanged;
- chat mode (a template that writes real control tokens around the messages): the messages'
  text is neutralised before templating: each control-token-like string gets its ``<`` (or
  ``[``) replaced by a look-alike (``‹``, ``⁅``), so it stays readable and is never parsed.

``control_token_flags`` names such strings for the injection flags of a judgment.
"""

from __future__ import annotations

import re

# ChatML / Llama 3 / Phi / Qwen / DeepSeek: <|im_start|>, <|eot_id|>, <|start_header_id|>, <｜end▁of▁sentence｜>;
# Gemma: <start_of_turn>, <end_of_turn>, <bos>, <eos>, <pad>; Llama 2 / Mistral: [INST], [/INST], <<SYS>>, </s>.
CONTROL_TOKEN = re.compile(
    r"<[|｜][^<>|｜\s]{1,48}[|｜]>"
    r"|</?(?:start_of_turn|end_of_turn|bos|eos|pad|unk|start_of_image|end_of_image)>"
    r"|\[/?(?:INST|SYSTEM_PROMPT|TOOL_CALLS|AVAILABLE_TOOLS)\]"
    r"|<</?SYS>>"
    r"|</s>"
)


def control_token_flags(text: str) -> list[str]:
    """Return the distinct control-token-like strings in ``text`` (first 5), in order of appearance."""
    found: list[str] = []
    if "<" not in text and "[" not in text:  # every match opens with one of them: no regex pass
        return found
    html_strike = "<s>" in text  # then "</s>" closes a strikethrough, not a sequence
    for m in CONTROL_TOKEN.finditer(text):
        if m.group(0) == "</s>" and html_strike:
            continue
        if m.group(0) not in found:
            found.append(m.group(0))
            if len(found) == 5:
                break
    return found


def _defuse(m: re.Match[str]) -> str:
    s = m.group(0)
    return ("‹" + s[1:]) if s[0] == "<" else ("⁅" + s[1:])


def neutralise(text: str) -> str:
    """Return ``text`` with every control-token-like string made plain (its first bracket swapped for a look-alike)."""
    return CONTROL_TOKEN.sub(_defuse, text) if ("<" in text or "[" in text) else text


def neutralise_messages(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    """Return chat messages whose contents are neutralised (roles and order unchanged)."""
    return [{**m, "content": neutralise(m.get("content") or "")} for m in messages]
