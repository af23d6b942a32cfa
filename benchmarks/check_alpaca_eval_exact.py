"""`arena lc-winrate --alpaca-eval-exact` beside the official `alpaca_eval` package, on the same rows.

    python benchmarks/check_alpaca_eval_exact.py --their-python /path/to/venv/bin/python

The official package cannot run here as it is (it downloads `df_gamed.csv` from a model hub), and it
is not a dependency of ours: install it in a venv of its own (`python -m venv /tmp/ae && /tmp/ae/bin/pip
install alpaca_eval`) and point `--their-python` at it. The script writes synthetic annotations (a
judge with a known taste for length; models that are better, worse, verbose, a padded copy and a
concise copy of the baseline) and a gamed table in their layout into a folder, runs their
`get_length_controlled_winrate` there (with `hf_hub_download` answering from the folder), runs ours in
this process, and prints both LC win rates per model and the largest difference. Exit 1 when they differ
by more than 1e-6 points. Without `--their-python` it prints ours only (and the figures
tests/test_alpaca_eval_exact.py pins, which came from their code on these rows).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

BASELINE = "gpt4_1106_preview"
N = 240
# model: (quality in log-odds, mean extra characters, SD of the extra characters)
MODELS = {"better": (0.8, 100, 300), "worse": (-0.7, -50, 300), "verbose": (0.0, 600, 300),
          "padded-copy": (0.0, 900, 60), "concise-copy": (0.0, -500, 60)}
SLOPE = 1.2  # the judge's taste for length: log-odds per unit of tanh(delta / 400)

THEIRS = r'''
import json, sys
from pathlib import Path
import pandas as pd
import alpaca_eval.metrics.glm_winrate as g
folder = Path(sys.argv[1])
g.hf_hub_download = lambda repo_id, filename, **kw: str(folder / filename)
out = {}
for model, rows in json.loads((folder / "annotations.json").read_text()).items():
    df = pd.DataFrame(rows)
    out[model] = [float(g.get_length_controlled_winrate(df.copy(), glm_name=glm, save_weights_dir=None)
                        ["length_controlled_winrate"]) for glm in ("length_controlled_v1", "length_controlled_noreg")]
print(json.dumps(out))
'''


def make_rows(seed: int = 0):
    """Return (annotations: model -> AlpacaEval annotation rows, gamed rows as a list of dicts)."""
    rng = np.random.default_rng(seed)
    base_len = rng.integers(300, 2000, N)
    difficulty = rng.normal(0.0, 0.6, N)
    annotations = {}
    for model, (quality, extra, sd) in MODELS.items():
        delta = np.maximum(rng.normal(extra, sd, N), 20 - base_len).astype(int)
        p = 1 / (1 + np.exp(-(quality + SLOPE * np.tanh(delta / 400) - difficulty)))
        u = rng.random(N)
        pref = np.where(u < p, 2.0, 1.0)
        pref[np.abs(u - p) < 0.02] = 1.5  # a few ties
        annotations[model] = [
            {"instruction": f"instruction {i}", "output_1": "b" * int(base_len[i]),
             "output_2": "m" * int(base_len[i] + delta[i]), "generator_1": BASELINE, "generator_2": model,
             "preference": float(pref[i]), "annotator": "synthetic"} for i in range(N)]
    gamed = []
    for name, extra in (("verbose", 700), ("concise", -600)):
        delta = rng.normal(extra, 150, N)
        p = 1 / (1 + np.exp(-(SLOPE * np.tanh(delta / 400))))
        std = -delta / np.std(delta, ddof=1)  # their column: baseline minus model, standardised
        for i in range(N):
            gamed.append({"model": f"{BASELINE}_{name}", "index": i, "preference": float(rng.random() < p[i]),
                          "std_delta_len": float(std[i]), "instruction_difficulty": float(difficulty[i]),
                          "not_gamed_baseline": False})
    return annotations, gamed


def write_fixture(folder: Path, seed: int = 0) -> None:
    import pandas as pd

    annotations, gamed = make_rows(seed)
    (folder / "annotations.json").write_text(json.dumps(annotations))
    pd.DataFrame(gamed).to_csv(folder / "df_gamed.csv", index=False)


def ours(folder: Path, *, with_gamed: bool = True) -> dict[str, float]:
    """Our LC win rates on the fixture in ``folder`` (each model's annotations as battles): with the gamed
    rows (their ``length_controlled_v1``), or with their difficulties alone (``length_controlled_noreg``)."""
    from arena_learning.rating.alpaca_exact import alpaca_eval_lc_win_rates, read_gamed
    from arena_learning.records import Battle

    annotations = json.loads((folder / "annotations.json").read_text())
    battles, lengths = [], {}
    for model, rows in annotations.items():
        for i, r in enumerate(rows):
            lengths[(f"p{i}", BASELINE)] = float(len(r["output_1"]))
            lengths[(f"p{i}", model)] = float(len(r["output_2"]))
            outcome = {1.0: "model_b", 2.0: "model_a", 1.5: "tie"}[r["preference"]]
            battles.append(Battle(prompt_id=f"p{i}", model_a=model, model_b=BASELINE, outcome=outcome))
    gamed = read_gamed(folder / "df_gamed.csv")
    positions = {f"p{i}": i for i in range(N)}
    if with_gamed:
        rows = alpaca_eval_lc_win_rates(battles, lengths, BASELINE, positions, gamed=gamed)
    else:
        rows = alpaca_eval_lc_win_rates(battles, lengths, BASELINE, positions, difficulty=gamed.difficulty)
    return {r.model: r.lc_win_rate for r in rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--their-python", help="a Python with the alpaca_eval package installed")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        write_fixture(folder)
        mine = {m: [v, ours(folder, with_gamed=False)[m]] for m, v in ours(folder).items()}
        theirs = None
        if args.their_python:
            done = subprocess.run([args.their_python, "-c", THEIRS, str(folder)], capture_output=True, text=True)
            if done.returncode != 0:
                print(done.stderr[-3000:], file=sys.stderr)
                return 2
            theirs = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"{'model':<14} {'glm':<24} {'ours':>12} {'alpaca_eval':>12} {'difference':>12}")
    worst = 0.0
    for model in MODELS:
        for k, glm in enumerate(("length_controlled_v1", "length_controlled_noreg")):
            if theirs is None:
                print(f"{model:<14} {glm:<24} {mine[model][k]:12.6f} {'-':>12} {'-':>12}")
                continue
            diff = mine[model][k] - theirs[model][k]
            worst = max(worst, abs(diff))
            print(f"{model:<14} {glm:<24} {mine[model][k]:12.6f} {theirs[model][k]:12.6f} {diff:12.2e}")
    if theirs is None:
        print("(no --their-python: ours only)")
        return 0
    print(f"largest difference: {worst:.2e} points")
    return 1 if worst > 1e-6 else 0


if __name__ == "__main__":
    sys.exit(main())
