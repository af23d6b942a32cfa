"""Pre-generated answers: other tools' answer files become ``Answer`` records.

Layouts (one answer per line of JSONL, or a JSON list):

- arena-hard-auto ``model_answer``: ``{"uid", "model", "messages": [...]}``, the
  assistant content a string or ``{"answer": ...}``;
- FastChat / MT-Bench ``model_answer``: ``{"question_id", "model_id", "choices": [{"turns": [...]}]}``;
- ours: ``{"prompt_id", "model", "turns": [...]}``;
- AlpacaEval ``model_outputs.json``: ``{"instruction", "output", "generator"}`` (``dataset``,
  ``input`` optional), one single-turn answer each.

The prompt id is the source's own id (``uid``, ``question_id``, ``prompt_id``),
as ``arena ingest`` gives prompts, so imported answers meet their prompts. AlpacaEval
records carry no id: theirs is the hash of the instruction that ``arena ingest`` gives the
AlpacaEval questions (``alpaca_eval.json``), so the two meet as well. ``<think>`` blocks in
an answer are moved to ``Answer.reasoning`` (``engines.reasoning``): never judged as the answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..engines.reasoning import split_answer_reasoning
from ..errors import ArenaError
from ..readers import alpaca_turn, bad_bytes, iter_rows, turns_hash
from ..records import Answer


@dataclass
class ImportReport:
    answers: list[Answer] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "file:line: reason"


def _assistant_text(content: Any, where: str) -> str:
    if isinstance(content, dict):
        content = content.get("answer", content.get("content"))
    if isinstance(content, list):  # OpenAI content parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    if not isinstance(content, str):
        raise ValueError(f"{where}: assistant content is {type(content).__name__}, not text")
    return content


def answer_from_record(rec: dict[str, Any], where: str, model: str | None = None) -> Answer:
    """Return the Answer in one record of any supported layout; ValueError says what is missing."""
    if "choices" in rec and ("question_id" in rec or "id" in rec):
        pid = rec.get("question_id", rec.get("id"))
        name = model or rec.get("model_id") or rec.get("model")
        turns = rec["choices"][0].get("turns") if rec["choices"] else None
    elif "messages" in rec:
        pid = rec.get("uid", rec.get("id", rec.get("prompt_id")))
        name = model or rec.get("model")
        turns = [_assistant_text(m.get("content"), where) for m in rec["messages"] if m.get("role") == "assistant"]
    elif "instruction" in rec and "output" in rec:
        return _alpaca_eval_answer(rec, where, model)
    elif "turns" in rec:
        pid = rec.get("prompt_id", rec.get("id", rec.get("uid")))
        name = model or rec.get("model")
        turns = rec["turns"]
    else:
        raise ValueError(f"{where}: not an answer record (expected 'messages', 'choices', 'turns', or AlpacaEval's "
                         "'instruction' and 'output')")
    if pid is None or not name:
        raise ValueError(f"{where}: answer record needs a prompt id and a model name (or pass --model)")
    if not isinstance(name, str) or isinstance(pid, (dict, list, bool)):
        raise ValueError(f"{where}: the model name must be text and the prompt id text or a number")
    if not isinstance(turns, list) or not turns or not all(isinstance(t, str) for t in turns):
        raise ValueError(f"{where}: answer has no assistant turns")
    return Answer(prompt_id=str(pid), model=str(name), turns=turns)


def _alpaca_eval_answer(rec: dict[str, Any], where: str, model: str | None) -> Answer:
    """Return the Answer of an AlpacaEval output record; its prompt id is ingest's id for the same instruction."""
    instruction, extra, output = rec["instruction"], rec.get("input"), rec["output"]
    if not isinstance(instruction, str) or not instruction.strip():
        raise ValueError(f"{where}: 'instruction' must be non-empty text")
    if extra is not None and not isinstance(extra, str):
        raise ValueError(f"{where}: 'input' must be text, not {type(extra).__name__}")
    if not isinstance(output, str):
        raise ValueError(f"{where}: 'output' must be text, not {type(output).__name__}")
    name = model or rec.get("generator")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}: AlpacaEval record has no 'generator' (the model name): pass --model")
    own = next((rec[k] for k in ("id", "uid", "question_id", "conversation_id") if rec.get(k) not in (None, "")), None)
    pid = str(own) if own is not None else turns_hash([alpaca_turn(instruction, extra)])
    return Answer(prompt_id=pid, model=name, turns=[output])


def read_answers(paths: list[Path], model: str | None = None) -> ImportReport:
    """Return the answers in ``paths``; bad lines are listed as skipped with file:line and the reason."""
    report = ImportReport()
    for path in paths:
        if not path.is_file():
            raise ArenaError(f"answer file not found: {path}")
        for row in iter_rows(path):
            where, rec = row.where, row.data
            if row.kind is not None:
                report.skipped.append(f"{where}: {row.reason}")
                continue
            if bad_bytes(rec):
                report.skipped.append(f"{where}: not valid UTF-8; re-encode the file as UTF-8")
                continue
            if not isinstance(rec, dict):
                report.skipped.append(f"{where}: a record must be a JSON object")
                continue
            try:
                # A reasoning model's <think> blocks are not its answer: the judge must not see them.
                report.answers.append(split_answer_reasoning(answer_from_record(rec, where, model)))
            except (ValueError, KeyError, IndexError, TypeError, AttributeError) as err:
                report.skipped.append(str(err) if str(err).startswith(where) else f"{where}: {err}")
    return report
