"""An offline LLM judge against the truth: the task suite's verifier knows every battle's winner.

On task suite 2 the arena's models (gemma 270M in two prompt formats, Qwen2.5-Coder 0.5B in two) answer the same
prompts; every pair is judged twice: by the verifier (each answer checked against its reference: the truth) and
by an offline LLM judge (default: Qwen2.5-Coder 1.5B Instruct, through llama.cpp, the ``own-reference`` judge
folder: it answers each request alone first, then says yes or no to each answer against its own; ``--template
pairwise-small`` judges both answers together in both orders with JSON verdicts). A judge never grades its own
weights, so the judge's model is never a contestant; the other Qwen is, and its family's win rate is the
self-preference check. Side by side:

- battle agreement with the truth: of the battles the verifier decides (a score gap), the share where the judge
  names the same winner (its tie counts as a miss), with a 95% Wilson interval; the judge's tie rate on the
  verifier's ties;
- position bias, length bias, the flip rate between orders (``audit_judge``), and the canaries the battle stage
  planted (null model, identical pair, truncated copy);
- the leaderboard the judge gives against the verifier's: Spearman, Kendall, agreement and separability with CIs,
  and the paper's average consistency (``compare_boards``: the code ``arena compare`` runs);
- self-preference: the Qwen contestant's win rate by the judge against by the truth;
- cost: games per minute and tokens per game (the ledger's calls).

    python benchmarks/bench_judge_truth.py --quick            # 16 prompts, 4 models: 96 battles, about 1.5 min quiet
    python benchmarks/bench_judge_truth.py                    # 48 prompts, 5 models: 480 battles, about 4 min
    python benchmarks/bench_judge_truth.py --prompts 4 --json out.json --workspace WS   # a smoke run, resumable

Everything is cached in the workspace's ledger: a rerun (or a run killed and started again) judges only what is
missing. ``--json PATH`` writes the figures, with top-level ``agreement`` (a share, 0-1) and ``spearman``.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

SHOTS = yaml.safe_load((REPO / "examples" / "quickstart.yaml").read_text())["models"][1]["prompt_format"]["few_shot"]
PARAMS = {"max_tokens": 16, "temperature": 0.0, "stop": ["\n"]}
# The paper's average consistency of its GPT-4 judge with LMSYS (Arena Learning, Table 2), and this project's
# imported GPT-4 grades of arena-hard against the human board (README: consistency with a human leaderboard).
PAPER_CONSISTENCY = 0.928
GPT4_IMPORTED_SPEARMAN = 0.814


def contestants(full: bool) -> list[dict[str, Any]]:
    """Return the contestants: gemma 270M 0-shot and 12-shot, Qwen 0.5B 12-shot and chat (+ Qwen 0.5B 0-shot)."""
    def completion(name: str, model: str, shots: bool) -> dict[str, Any]:
        spec: dict[str, Any] = {"name": name, "engine": "llamacpp", "model": model, "mode": "completion",
                                "params": PARAMS}
        if shots:
            spec["prompt_format"] = {"few_shot": SHOTS}
        return spec

    models = [
        completion("gemma-270m-0shot", "gemma-3-270m", False),
        completion("gemma-270m-12shot", "gemma-3-270m", True),
        completion("qwen-0.5b-12shot", "qwen2.5-coder-0.5b-instruct", True),
        {"name": "qwen-0.5b-chat", "engine": "llamacpp", "model": "qwen2.5-coder-0.5b-instruct", "mode": "chat",
         "system_prompt": "Reply with only the final answer.", "params": {"max_tokens": 48, "temperature": 0.0}},
    ]
    if full:
        models.append(completion("qwen-0.5b-0shot", "qwen2.5-coder-0.5b-instruct", False))
    return models


def write_configs(root: Path, n: int, full: bool, judge_model: str, template: str) -> tuple[Path, Path, str]:
    """Write the verifier run's config and the LLM judge's; return their paths and the judge's name."""
    base = {"name": "judge-truth", "tasks": {"n": n, "seed": 7, "suite": 2}, "models": contestants(full),
            "ratings": {"bootstrap": 100, "seed": 0}}
    truth = {**base, "judge": {"kind": "verifier"}}
    judge_name = f"{template}-{judge_model}"
    llm = {**base, "judge": {
        "kind": "llm", "name": judge_name, "template": template, "structured": True,
        "model": {"name": judge_name, "engine": "llamacpp", "model": judge_model, "mode": "chat"}}}
    paths = root / "truth.yaml", root / "llm.yaml"
    for path, cfg in zip(paths, (truth, llm)):
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return paths[0], paths[1], judge_name


def arena(*args: object) -> float:
    """Run ``arena ARGS`` in a process of its own; return its wall time (exit on failure, showing its output)."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "arena_learning", *map(str, args)], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"arena {' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n"
                 f"{proc.stderr[-3000:]}")
    return time.perf_counter() - start


def judge_cost(ws: Path, judge: str) -> dict[str, Any]:
    """Return the judge's calls, tokens per game and the seconds its calls took (the ledger's latencies)."""
    db = sqlite3.connect(f"file:{ws / 'arena.db'}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT COUNT(*), SUM(tokens_in), SUM(tokens_out), SUM(latency_s) FROM calls "
                          "WHERE requested_by = ? AND status = 'ok'", (judge,)).fetchone()
    finally:
        db.close()
    calls, tin, tout, secs = (rows[0] or 0), (rows[1] or 0), (rows[2] or 0), (rows[3] or 0.0)
    return {"calls": calls, "tokens_in_per_game": tin / calls if calls else None,
            "tokens_out_per_game": tout / calls if calls else None, "call_seconds": secs,
            "games_per_minute_calls": 60 * calls / secs if secs else None}


def truth_agreement(truth: dict, judged: dict) -> dict[str, Any]:
    """Return the judge's agreement with the verifier on the battles the verifier decides, and its tie rate on the
    verifier's ties (battle outcomes of ``audit.battle_outcomes``)."""
    from arena_learning.arena.audit import TIE, wilson_interval

    decided = [k for k, v in truth.items() if v != TIE and k in judged]
    same = sum(judged[k] == truth[k] for k in decided)
    judge_ties_on_decided = sum(judged[k] == TIE for k in decided)
    truth_ties = [k for k, v in truth.items() if v == TIE and k in judged]
    return {
        "decided": len(decided), "agree": same, "agreement": same / len(decided) if decided else None,
        "agreement_ci": wilson_interval(same, len(decided)), "judge_ties_on_decided": judge_ties_on_decided,
        "truth_ties": len(truth_ties),
        "tie_rate_on_truth_ties": (sum(judged[k] == TIE for k in truth_ties) / len(truth_ties)) if truth_ties else None,
    }


def family_win_rate(battles: list, family: str) -> float | None:
    """Return the share of points a family's contestants take in battles against other families (ties half)."""
    points, games = 0.0, 0
    for b in battles:
        a_in, b_in = family in b.model_a, family in b.model_b
        if a_in == b_in:
            continue
        games += 1
        won = b.outcome == ("model_a" if a_in else "model_b")
        points += 1.0 if won else 0.5 if b.outcome.startswith("tie") else 0.0
    return points / games if games else None


def measure(ws: Path, judge: str, judge_seconds: float) -> dict[str, Any]:
    """Return every figure of the judge against the verifier in workspace ``ws``."""
    from arena_learning.arena.audit import audit_judge, battle_outcomes
    from arena_learning.arena.canaries import stored_reports
    from arena_learning.rating.bt import leaderboard
    from arena_learning.rating.consistency import compare_boards
    from arena_learning.store import Store

    with Store(ws, readonly=True) as store:
        answers = store.get_answers()
        truth_j, judge_j = store.get_judgments("verifier"), store.get_judgments(judge)
        truth_b, judge_b = store.get_battles("verifier"), store.get_battles(judge)
        canaries = [r.as_dict() for r in stored_reports(store, judge)]
    truth_board = leaderboard(truth_b, bootstrap=100, seed=0)
    judge_board = leaderboard(judge_b, bootstrap=100, seed=0)
    consistency = compare_boards(judge_board, truth_board, match="exact")
    audit = audit_judge(judge_j, answers)
    cost = judge_cost(ws, judge)
    games = len(judge_j)
    return {
        "judge": judge,
        "games": games,
        **{k: v for k, v in truth_agreement(battle_outcomes(truth_j), battle_outcomes(judge_j)).items()},
        "spearman": consistency.spearman, "kendall": consistency.kendall,
        "board_agreement": consistency.agreement, "separability": consistency.separability,
        "separability_truth": consistency.separability_reference, "average_consistency": consistency.average,
        "boards": {"truth": [r.model_dump() for r in truth_board], "judge": [r.model_dump() for r in judge_board]},
        "audit": audit.to_dict(),
        "canaries": canaries,
        "self_preference": {"family": "qwen", "judge_win_rate": family_win_rate(judge_b, "qwen"),
                            "truth_win_rate": family_win_rate(truth_b, "qwen")},
        "cost": {**cost, "stage_seconds": judge_seconds,
                 "games_per_minute": 60 * games / judge_seconds if judge_seconds else None},
        "paper_average_consistency": PAPER_CONSISTENCY, "gpt4_imported_spearman": GPT4_IMPORTED_SPEARMAN,
    }


def fmt(x: float | None, spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


def report(fig: dict[str, Any]) -> None:
    a = fig["audit"]
    ci = fig["agreement_ci"]
    print(f"judge {fig['judge']}: {fig['games']} games")
    print(f"battle agreement with the truth: {fmt(fig['agreement'])} of {fig['decided']} decided battles "
          f"[{fmt(ci[0] if ci else None)}, {fmt(ci[1] if ci else None)}] (its ties there: "
          f"{fig['judge_ties_on_decided']}); tie rate on the verifier's {fig['truth_ties']} ties: "
          f"{fmt(fig['tie_rate_on_truth_ties'])}")
    print(f"position bias (first wins of decisive games): {fmt(a['position_bias'])}; order consistency: "
          f"{fmt(a['order_consistency'])} of {a['pairs_both_orders']} pairs; length bias (longer wins): "
          f"{fmt(a['length_bias'])}; parse failures: {fmt(a['parse_failure_rate'])}")
    for c in fig["canaries"]:
        verdicts = {True: "ok", False: "FAILED", None: "n/a"}  # n/a: no game to tell (a single judge has no orders)
        checks = ", ".join(f"{k['name']} {fmt(k['value'], '.1f')}% {verdicts[k['passed']]} ({k['games']} games)"
                           for k in c["checks"])
        print(f"canaries ({c['calls']} games): {checks}")
    print(f"leaderboard vs the verifier's: Spearman {fmt(fig['spearman'])}, Kendall {fmt(fig['kendall'])}, "
          f"agreement {fmt(fig['board_agreement'])}, separability {fmt(fig['separability'])} (truth's "
          f"{fmt(fig['separability_truth'])}), average consistency {fmt(fig['average_consistency'])} "
          f"(paper's GPT-4 vs LMSYS: {PAPER_CONSISTENCY}; imported GPT-4 grades vs humans, Spearman "
          f"{GPT4_IMPORTED_SPEARMAN})")
    for side in ("truth", "judge"):
        print(f"  {side:5}: " + ", ".join(f"{r['model']} {r['rating']:.0f}" for r in fig["boards"][side]))
    sp = fig["self_preference"]
    print(f"self-preference: qwen contestants' win rate by the judge {fmt(sp['judge_win_rate'])}, by the truth "
          f"{fmt(sp['truth_win_rate'])}")
    cost = fig["cost"]
    print(f"cost: {fmt(cost['games_per_minute'], '.1f')} games/min over the stage "
          f"({fmt(cost['games_per_minute_calls'], '.1f')} by the calls' own time); "
          f"{fmt(cost['tokens_in_per_game'], '.0f')} tokens in, {fmt(cost['tokens_out_per_game'], '.1f')} out "
          f"per game")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="16 prompts, 4 models")
    ap.add_argument("--prompts", type=int, help="test prompts (default: 16 quick, 48 full)")
    ap.add_argument("--judge-model", default="qwen2.5-coder-1.5b-instruct", help="a registered model or GGUF path")
    ap.add_argument("--template", default="own-reference", help="judge folder (built-in name or path; measured: "
                    "own-reference, pairwise-small)")
    ap.add_argument("--workspace", type=Path, help="workspace to use and keep (default: a temporary one)")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args()
    n = args.prompts or (16 if args.quick else 48)
    with tempfile.TemporaryDirectory(prefix="judge-truth-") as tmp:
        ws = args.workspace or Path(tmp) / "ws"
        ws.mkdir(parents=True, exist_ok=True)
        truth_cfg, llm_cfg, judge = write_configs(ws, n, not args.quick, args.judge_model, args.template)
        answer_s = arena("run", truth_cfg, "-w", ws)
        judge_s = arena("battle", llm_cfg, "-w", ws)
        print(f"answers and the verifier: {answer_s:.1f} s; the LLM judge's battle stage: {judge_s:.1f} s")
        fig = measure(ws, judge, judge_s)
        fig["prompts"] = n
        report(fig)
        if args.json:
            args.json.write_text(json.dumps(fig, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
