"""How well the board of one prompt predicts held-out battles, against the global board (as P2L measures itself).

For each test prompt of a workspace with battles, left out in turn (leave-one-prompt-out), or for the prompts of
each of ``--folds`` folds: the global board is fitted on the battles of every other prompt, and the board of the
prompt (``arena prompt-board``, rating/prompt_board.py) on the battles of its K nearest other prompts, for each K of
``--ks``. Each board predicts the held-out prompt's battles: the Bradley-Terry probability that model_a wins.
Printed: log-loss (a tie counts as half a win each) and accuracy on the decisive battles, per board, with the
ratio to the global board's, and a plain verdict: does any K beat the global board?

Light: a few hundred to a few thousand Bradley-Terry fits of a handful of models, and one pass of the bundled
embedding model over the test prompts.

    .venv/bin/python benchmarks/bench_prompt_board.py workspaces/flywheel
    .venv/bin/python benchmarks/bench_prompt_board.py WS --ks 5,20,100 --record   # append the figures to the log
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workspace", nargs="?", default=None,
                        help="workspace with battles on its test set (default: workspaces/flywheel)")
    parser.add_argument("--ks", default="5,10,20,50,100", help="neighbour counts K, comma-separated")
    parser.add_argument("--judge", default=None, help="whose battles (default: the run's or the only judge)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the embedding pass")
    parser.add_argument("--record", action="store_true", help="append the figures to benchmarks/results.jsonl")
    args = parser.parse_args(argv)

    from arena_learning.curate.embed import embedding_texts, text_embedder
    from arena_learning.curate.settings import EmbedSettings
    from arena_learning.pipeline import TEST_SET, prompt_board_judge
    from arena_learning.rating.prompt_board import held_out_scores, paired_gain, rated_prompts
    from arena_learning.store import Store

    ws = Path(args.workspace) if args.workspace else ROOT / "workspaces" / "flywheel"
    if not ws.exists():
        parser.error(f"{ws}: no such workspace; give one with battles on its test set")
    with Store(ws, readonly=True) as store:
        judge = prompt_board_judge(store, args.judge)
        battles = store.get_battles(judge, TEST_SET)
        prompts = rated_prompts(battles, store.get_prompts(TEST_SET))
    models = sorted({m for b in battles for m in (b.model_a, b.model_b)})
    ks = sorted({int(k) for k in args.ks.split(",") if int(k) < len(prompts)})
    ties = sum(b.outcome == "tie" for b in battles)
    print(f"{ws.name}: {len(battles)} battles of {judge!r} on {len(prompts)} test prompts, {len(models)} models "
          f"({ties} ties); boards: global, K = {', '.join(map(str, ks))}; leave-one-prompt-out", flush=True)

    t0 = time.perf_counter()
    emb = text_embedder(EmbedSettings(threads=args.threads))(embedding_texts(prompts))
    t1 = time.perf_counter()
    scores = held_out_scores(battles, prompts, emb, ks, range(len(prompts)))
    t2 = time.perf_counter()
    print(f"embedding {t1 - t0:.1f} s, {len(prompts) * (1 + len(ks))} fits {t2 - t1:.1f} s\n")

    glob = scores["global"]
    gains = {n: paired_gain(s, glob) for n, s in scores.items() if n != "global"}
    print("per board: log-loss (every battle, a tie half a win each; and the decisive battles alone), accuracy "
          "(decisive battles), each with its difference to the global board's: paired, 95% CI by bootstrap over the "
          "held-out prompts")

    def diff(d: float, lo: float, hi: float) -> str:
        return f"{d:+.4f} [{lo:+.4f}, {hi:+.4f}]"

    print(f"{'board':>8} {'log-loss':>9} {'/ global':>9} {'minus global':>26} {'decisive':>9} {'minus global':>26} "
          f"{'accuracy':>9} {'minus global':>26}")
    for name, s in scores.items():
        g = gains.get(name)
        cells = [diff(g.log_loss, g.log_loss_low, g.log_loss_high),
                 diff(g.decisive_log_loss, g.decisive_log_loss_low, g.decisive_log_loss_high),
                 diff(g.accuracy, g.accuracy_low, g.accuracy_high)] if g else ["", "", ""]
        print(f"{name:>8} {s.log_loss:9.4f} {s.log_loss / glob.log_loss:9.3f} {cells[0]:>26} "
              f"{s.decisive_log_loss:9.4f} {cells[1]:>26} {s.accuracy:9.4f} {cells[2]:>26}")
    print(f"({glob.battles} held-out battles, {glob.decisive} decisive, on {len(glob.loss_sums)} prompts)")
    # a board beats the global one when both log-losses are lower beyond chance and its accuracy is not lower
    # beyond chance; of those, the lowest log-loss
    beating = [n for n, g in gains.items() if g.log_loss_high < 0 and g.decisive_log_loss_high < 0
               and g.accuracy_high >= 0]
    best = min(beating or gains, key=lambda n: scores[n].log_loss)
    b, g = scores[best], gains[best]
    if beating:
        verdict = (f"the board of the {best[2:]} nearest prompts predicts held-out battles better than the global "
                   f"board: log-loss {b.log_loss:.4f} against {glob.log_loss:.4f} "
                   f"({diff(g.log_loss, g.log_loss_low, g.log_loss_high)}), on the decisive battles "
                   f"{b.decisive_log_loss:.4f} against {glob.decisive_log_loss:.4f} "
                   f"({diff(g.decisive_log_loss, g.decisive_log_loss_low, g.decisive_log_loss_high)}), accuracy "
                   f"{b.accuracy:.4f} against {glob.accuracy:.4f} ({diff(g.accuracy, g.accuracy_low, g.accuracy_high)}"
                   ", not lower beyond chance)")
        worse = [n[2:] for n, x in gains.items() if x.accuracy_high < 0]
        if worse:
            verdict += f"; with K = {', '.join(worse)} the accuracy is lower than the global board's beyond chance"
    else:
        verdict = (f"no per-prompt board beats the global board here: the best by log-loss, K = {best[2:]}, has "
                   f"log-loss {b.log_loss:.4f} against the global {glob.log_loss:.4f} "
                   f"({diff(g.log_loss, g.log_loss_low, g.log_loss_high)}), on the decisive battles "
                   f"{b.decisive_log_loss:.4f} against {glob.decisive_log_loss:.4f} "
                   f"({diff(g.decisive_log_loss, g.decisive_log_loss_low, g.decisive_log_loss_high)}), accuracy "
                   f"{b.accuracy:.4f} against {glob.accuracy:.4f} ({diff(g.accuracy, g.accuracy_low, g.accuracy_high)})"
                   "; to predict who wins, use the global leaderboard; a prompt's board shows its neighbourhood")
    print("\n" + verdict)

    if args.record:
        import results

        command = "python benchmarks/bench_prompt_board.py " + shlex.join(sys.argv[1:])
        note = f"{ws.name}: {len(battles)} battles, {len(prompts)} prompts, {len(models)} models, leave-one-out"
        results.record("prompt_board.global.log_loss", round(glob.log_loss, 4), "nats", "lower", command, note)
        results.record("prompt_board.global.accuracy", round(glob.accuracy, 4), "share", "higher", command, note)
        for name, s in scores.items():
            if name == "global":
                continue
            k = name[2:]
            results.record(f"prompt_board.k{k}.log_loss", round(s.log_loss, 4), "nats", "lower", command, note)
            results.record(f"prompt_board.k{k}.accuracy", round(s.accuracy, 4), "share", "higher", command, note)
        results.record("prompt_board.best_log_loss_ratio", round(b.log_loss / glob.log_loss, 3), "x", "lower",
                       command, f"{note}; K = {best[2:]} against the global board "
                       f"({'beats it' if beating else 'does not beat it'}): log-loss "
                       f"{diff(g.log_loss, g.log_loss_low, g.log_loss_high)}, decisive battles' log-loss "
                       f"{diff(g.decisive_log_loss, g.decisive_log_loss_low, g.decisive_log_loss_high)}, accuracy "
                       f"{diff(g.accuracy, g.accuracy_low, g.accuracy_high)} (95% CIs, paired bootstrap over prompts)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
