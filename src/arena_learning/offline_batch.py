"""Offline batch files: a stage's endpoint calls written as Batch API requests, and the replies read back.

For teams that run ``vllm run-batch`` (or any runner of OpenAI's batch format) on their own GPUs.
``export_requests`` runs the stage on a scratch copy of the workspace with the ledger road capturing
(``engines.batch.capturing``): every call it would still send is noted, none is sent, and the scratch copy
(with the failed answers and judgments the stage stored there) is thrown away. The calls of endpoint models
(``engine: openai``) are written as request lines whose custom_id is the call's ledger key, and recorded in the
workspace (a batch whose endpoint is ``file:`` and the file's path), so ``import_results`` can turn each reply
line into the ledger row a synchronous call would have written. The stage then runs with those calls cached.

What a stage asks next depends on what came back: a conversation's second turn on its first answer, an adaptive
schedule's next round on the verdicts so far. Such a stage takes one export and import per turn or round.
"""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from . import pipeline
from .config import RunConfig
from .engines.batch import Capture, capturing, job_id
from .engines.batch_lines import BadLine, BatchCall, ReplyLine, read_replies, settle
from .errors import ArenaError
from .store import Store

Stage = Literal["answers", "battles"]


@dataclass
class ExportReport:
    """What an export wrote: calls per endpoint model, and the calls of other models it could not write."""

    out: Path
    calls: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)  # models that are no endpoint: run the stage for them
    answers_missing: int = 0  # battles: answer calls the ledger lacks (the pairs that need them are left out)


@dataclass
class ImportReport:
    """What an import read: replies kept, failed calls, lines that could not be read, replies to unknown calls."""

    ok: int = 0
    failed: int = 0
    bad: list[BadLine] = field(default_factory=list)
    unknown: list[ReplyLine] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # the first failed calls' errors


class _Stop(Exception):
    """Raised to end a captured stage whose next calls depend on replies it has not had (an adaptive round)."""


def export_requests(cfg: RunConfig, store: Store, stage: Stage, out: Path,
                    models: Sequence[str] = ()) -> ExportReport:
    """Write the calls ``stage`` would still send to endpoint models (of ``models``, if given) as request lines to
    ``out``; record them in ``store``. Calls the ledger holds are left out."""
    capture, missing = _capture(cfg, store, stage)
    report = ExportReport(out=out, skipped=dict(capture.skipped), answers_missing=missing)
    chosen = {name: calls for name, calls in capture.calls.items() if not models or name in models}
    unknown = sorted(set(models) - set(capture.calls) - {m.name for m in cfg.models}
                     - {j.model.name for j in (cfg.judge, *cfg.judge.members) if j.model is not None})
    if unknown:
        raise ArenaError(f"--model {unknown[0]!r} is not a contestant or judge model of the config")
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "wb") as fh:
        for calls in chosen.values():
            fh.writelines(line + b"\n" for _, line in calls.values())
    taken = {r.id for r in store.get_batches()}
    where = f"file:{out.resolve()}"
    for name, calls in chosen.items():
        first: BatchCall = next(iter(calls.values()))[0]
        ident = job_id(first.model, where, list(calls), taken)
        taken.add(ident)
        store.add_batch(ident, name, where, [(k, c.to_json()) for k, (c, _) in calls.items()])
        store.update_batch(ident, status="exported")
        report.calls[name] = len(calls)
    return report


def _capture(cfg: RunConfig, store: Store, stage: Stage) -> tuple[Capture, int]:
    """Return the calls ``stage`` would send, captured while it runs on a scratch copy of ``store``, and (battles)
    the answer calls the ledger lacks: the answers stage runs first, there, to store the answers it holds."""
    missing = 0
    with tempfile.TemporaryDirectory(prefix="arena-export-") as tmp:
        store.copy_to(Path(tmp) / Store.FILE)
        with Store(tmp) as scratch, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the captured stage's canaries and counts are of calls not made
            prompts = pipeline.stage_prompts(cfg, scratch)
            if stage == "battles":
                with capturing() as answers:
                    pipeline.stage_answer(cfg, scratch, prompts=prompts, show_progress=False)
                missing = sum(len(c) for c in answers.calls.values()) + sum(answers.skipped.values())
            with capturing() as capture:
                if stage == "answers":
                    pipeline.stage_answer(cfg, scratch, prompts=prompts, show_progress=False)
                else:
                    if cfg.battles.schedule == "adaptive":
                        capture.on_repeat = _stop  # the next round is chosen on this one's verdicts
                    try:
                        pipeline.stage_battle(cfg, scratch, prompts=prompts, show_progress=False)
                    except _Stop:
                        pass
        return capture, missing


def _stop() -> None:
    raise _Stop


def import_results(store: Store, path: Path) -> ImportReport:
    """Read the reply lines of ``path`` (the Batch API's output format) into the ledger of ``store``.

    A line that cannot be read, or that answers a call no export (or batch job) of this workspace holds, is
    reported and skipped; every other line is kept: a reply as the answer, an error as a failed call (asked again
    by the next run or export).
    """
    if not path.is_file():
        raise ArenaError(f"no results file at {path}: give the output file of the batch run")
    report = ImportReport()
    lines: list[ReplyLine] = []
    for line in read_replies(path.read_text(encoding="utf-8", errors="replace")):
        if isinstance(line, BadLine):
            report.bad.append(line)
        else:
            lines.append(line)
    calls = {k: BatchCall.from_json(c) for k, c in store.find_batch_calls([x.custom_id for x in lines]).items()}
    rows = []
    for line in lines:
        call = calls.get(line.custom_id)
        if call is None:
            report.unknown.append(line)
            continue
        row, comp = settle(line.custom_id, call, line)
        rows.append(row)
        if comp is None:
            report.failed += 1
            if len(report.errors) < 5:
                report.errors.append(f"line {line.number} ({line.custom_id}): {row['error']}")
        else:
            report.ok += 1
    store.record_calls(rows)
    return report
