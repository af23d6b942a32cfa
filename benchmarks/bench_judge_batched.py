"""LLM-judge games batched against one at a time: the same judge requests, the same model, in one process.

An offline LLM judge's calls are chat requests, most with a JSON schema (``single-small``, ``pairwise-small``): they
used to run one at a time through ``Llama.create_chat_completion``. Now they batch like completions (the chat
handler's own prompt tokens, the schema's grammar masked in every row; ``parallel: 1`` opts out). This benchmark:

1. runs ``bench_judge_truth.py``'s quick arena (16 suite-2 prompts, four contestants) with the LLM judge, so the
   workspace's ledger holds the judge's real requests (kept with ``--workspace``: a rerun asks nothing again);
2. replays the first ``--limit`` of them in this process, through the judge's model at ``parallel: 1`` (one at a
   time) and at ``parallel: N`` (batched), each into a fresh ledger (every call sent), after one warm-up call each;
3. prints games per minute both ways, the ratio, tokens per game, the batched context's prefill / decode split,
   and how many verdicts are the same text and the same score (batched logits come from other kernels than one
   row's, which round their last bits otherwise: a near tie may flip).

    python benchmarks/bench_judge_batched.py                              # single-small, 48 games, ~6 min quiet
    python benchmarks/bench_judge_batched.py --template pairwise-small --limit 32
    python benchmarks/bench_judge_batched.py --limit 4 --workspace WS     # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import bench_judge_truth  # noqa: E402 - a sibling script, found through the path set above


def judge_requests(ws: Path, judge: str, limit: int) -> list[Any]:
    """Return the first ``limit`` requests the judge ``judge`` made in workspace ``ws`` (the ledger's, in order)."""
    from arena_learning.engines.base import Request

    db = sqlite3.connect(f"file:{ws / 'arena.db'}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT request FROM calls WHERE requested_by = ? AND status = 'ok' "
                          "ORDER BY created_at, key LIMIT ?", (judge, limit)).fetchall()
    finally:
        db.close()
    out = []
    for (text,) in rows:
        req = json.loads(text)
        # The ledger's params are the key's (the spec's defaults, the request's own, and how it was decoded).
        params = {k: v for k, v in req.pop("params").items() if k not in ("chat", "decoding", "prompt_format")}
        out.append(Request(params=params, **req))
    return out


def replay(spec: Any, requests: list[Any], parallel: int) -> dict[str, Any]:
    """Run ``requests`` through ``spec``'s model at ``parallel``, into a fresh ledger; return texts and timing."""
    from arena_learning.engines import build_engine
    from arena_learning.engines.calls import arun_requests
    from arena_learning.store import Store

    engine = build_engine(spec.model_copy(update={"parallel": parallel}))
    with tempfile.TemporaryDirectory(prefix="judge-batched-") as tmp, Store(Path(tmp) / "ws") as store:
        asyncio.run(arun_requests(store, engine, requests[:1]))  # warm-up: the model, the batched context
        start = time.perf_counter()
        outs = asyncio.run(arun_requests(store, engine, requests[1:]))
        seconds = time.perf_counter() - start
    stats = engine.batch_stats() if parallel > 1 else {}  # type: ignore[attr-defined]
    done = [o for o in outs if o is not None]
    return {"parallel": parallel, "seconds": seconds, "games": len(done),
            "games_per_minute": 60 * len(done) / seconds if seconds else None,
            "tokens_in": sum(o.tokens_in for o in done), "tokens_out": sum(o.tokens_out for o in done),
            "texts": [o.text if o is not None else None for o in outs], "batch": stats}


def score(text: str | None) -> Any:
    """Return a verdict's score (a JSON verdict's ``score``, else its first number), or None."""
    if text is None:
        return None
    try:
        verdict = json.loads(text)
        if isinstance(verdict, dict):
            return verdict.get("score", verdict.get("winner", verdict))
    except ValueError:
        pass
    import re

    m = re.search(r"\d+", text)
    return m.group(0) if m else text.strip()[:20]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--template", default="single-small", help="judge folder (single-small, pairwise-small, "
                    "own-reference, ...)")
    ap.add_argument("--judge-model", default="qwen2.5-coder-1.5b-instruct", help="a registered model or GGUF path")
    ap.add_argument("--prompts", type=int, default=16, help="test prompts of the arena that makes the requests")
    ap.add_argument("--limit", type=int, default=48, help="judge requests replayed each way (the first is warm-up)")
    ap.add_argument("--parallel", type=int, default=8, help="rows of the batched path (the engine's default: 8)")
    ap.add_argument("--workspace", type=Path, help="workspace to use and keep (default: a temporary one)")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="judge-batched-ws-") as tmp:
        ws = args.workspace or Path(tmp) / "ws"
        ws.mkdir(parents=True, exist_ok=True)
        truth_cfg, llm_cfg, judge = bench_judge_truth.write_configs(ws, args.prompts, False, args.judge_model,
                                                                    args.template)
        made = bench_judge_truth.arena("run", truth_cfg, "-w", ws) + bench_judge_truth.arena("battle", llm_cfg,
                                                                                          "-w", ws)
        print(f"the arena that makes the judge's requests: {made:.1f} s")
        from arena_learning.config import ModelSpec

        spec = ModelSpec(**yaml.safe_load(llm_cfg.read_text())["judge"]["model"])
        requests = judge_requests(ws, judge, args.limit)
        if len(requests) < 2:
            sys.exit(f"the judge {judge} made {len(requests)} calls in {ws}: nothing to replay")
        one = replay(spec, requests, 1)
        many = replay(spec, requests, args.parallel)
    pairs = list(zip(one["texts"], many["texts"]))
    fig = {
        "template": args.template, "judge_model": args.judge_model, "games": one["games"],
        "one_at_a_time_games_per_minute": one["games_per_minute"],
        "batched_games_per_minute": many["games_per_minute"], "parallel": args.parallel,
        "ratio": one["seconds"] / many["seconds"] if many["seconds"] else None,
        "same_text": sum(a == b for a, b in pairs), "same_score": sum(score(a) == score(b) for a, b in pairs),
        "tokens_in_per_game": one["tokens_in"] / max(1, one["games"]),
        "tokens_out_per_game": one["tokens_out"] / max(1, one["games"]), "batch": many["batch"],
    }
    b = many["batch"]
    print(f"{args.template} judged by {args.judge_model}: {fig['games']} games each way, "
          f"{fig['tokens_in_per_game']:.0f} tokens in and {fig['tokens_out_per_game']:.1f} out per game")
    print(f"one at a time: {one['games_per_minute']:.1f} games/min ({one['seconds']:.1f} s); batched x{args.parallel}: "
          f"{many['games_per_minute']:.1f} games/min ({many['seconds']:.1f} s): {fig['ratio']:.2f}x")
    if b:
        print(f"batched context: {b['prefill_tokens']} prompt tokens in {b['prefill_ms'] / 1000:.1f} s "
              f"({b['prefill_steps']} chunks), {b['decode_tokens']} tokens decoded in {b['decode_ms'] / 1000:.1f} s "
              f"({b['decode_steps']} steps, at most {b['peak']} sequences a step)")
    print(f"the same verdict text: {fig['same_text']} of {len(pairs)}; the same score: {fig['same_score']} of "
          f"{len(pairs)}")
    if args.json:
        args.json.write_text(json.dumps(fig, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
