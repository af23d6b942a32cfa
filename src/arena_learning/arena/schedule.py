"""Schedules: which pairs of models meet on which prompts.

Which pairs meet is a choice, and it decides what the judge calls buy:

* ``all``: every unordered pair (round robin). The most information, K(K-1)/2 pairs.
* ``baseline``: every model against one baseline (arena-hard style). K-1 pairs; ratings
  are comparable only through the baseline, so models far from it are ranked coarsely.
* ``target``: one target model against reference models (the flywheel: the battles that
  show where the target loses, to harvest training data from).
* ``adaptive``: ``AdaptiveScheduler`` spends judge calls in batches on the pairs whose
  order in the current Bradley-Terry ranking is still uncertain.

In a static schedule every pair meets on every prompt (``battles.plan_battles``).

Pair tuples are ``(model_a, model_b)``: the names a ``Battle`` carries. The judge plays
each pair in both orders, so the tuple order gives neither model the first position; the
conventions (a baseline is always ``model_b``, a target always ``model_a``) only make
"model_a won" read "the contestant beat the baseline" / "the target beat the reference".
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from itertools import combinations
from typing import TYPE_CHECKING

from ..errors import ArenaError
from ..records import Battle

if TYPE_CHECKING:
    import numpy as np

# numpy is imported where the adaptive scheduler uses it: the static schedules, which every
# `arena battle` and `arena run` plans with, need none, and numpy is a tenth of the start-up.

SCHEDULE_KINDS = ("all", "baseline", "target", "adaptive")
"""Names of the schedules a run config can choose."""

ScheduledBattle = tuple[str, str, str]
"""(prompt_id, model_a, model_b): one battle to judge (in both orders)."""


# --------------------------------------------------------------------------- static schedules


def all_pairs(models: Sequence[str]) -> list[tuple[str, str]]:
    """Return every unordered pair of ``models`` once, in config order."""
    return list(combinations(models, 2))


def baseline_pairs(models: Sequence[str], baseline: str) -> list[tuple[str, str]]:
    """Return ``(model, baseline)`` for every model other than ``baseline``, in config order.

    The baseline is always ``model_b``. It must be one of ``models`` (so a misspelt name
    is an error here, not a run of battles against a model with no answers).
    """
    _check_names(models)
    if baseline not in models:
        raise ArenaError(
            f"baseline {baseline!r} is not one of the models ({', '.join(models)}): "
            "add it to the models or fix its name"
        )
    pairs = [(m, baseline) for m in models if m != baseline]
    if not pairs:
        raise ArenaError(f"the baseline schedule needs a model besides the baseline {baseline!r}")
    return pairs


def target_pairs(target: str, references: Sequence[str]) -> list[tuple[str, str]]:
    """Return ``(target, reference)`` for every reference, in the order given.

    The target is always ``model_a``; a reference equal to the target is left out
    (a config may list every model as a reference).
    """
    _check_names([target, *[r for r in references if r != target]])
    pairs = [(target, r) for r in references if r != target]
    if not pairs:
        raise ArenaError(f"the target schedule needs at least one reference model besides the target {target!r}")
    return pairs


def schedule_pairs(
    kind: str, models: Sequence[str], *, baseline: str | None = None, target: str | None = None
) -> list[tuple[str, str]]:
    """Return the pairs a static schedule ``kind`` plays, as ``(model_a, model_b)`` tuples.

    Args:
        kind: ``"all"``, ``"baseline"`` (needs ``baseline``) or ``"target"`` (needs
            ``target``; the references are the other models).
        models: the contestants, in config order.
    """
    _check_names(models)
    if kind == "all":
        if len(models) < 2:
            raise ArenaError(f"a round robin needs at least two models, got {len(models)}")
        return all_pairs(models)
    if kind == "baseline":
        if baseline is None:
            raise ArenaError("the baseline schedule needs a baseline model: set schedule.baseline to one of the models")
        return baseline_pairs(models, baseline)
    if kind == "target":
        if target is None:
            raise ArenaError("the target schedule needs a target model: set schedule.target to one of the models")
        if target not in models:
            raise ArenaError(
                f"target {target!r} is not one of the models ({', '.join(models)}): "
                "add it to the models or fix its name"
            )
        return target_pairs(target, [m for m in models if m != target])
    if kind == "adaptive":
        raise ArenaError("the adaptive schedule has no fixed list of pairs: run it with AdaptiveScheduler")
    raise ArenaError(f"unknown schedule {kind!r}: use one of {', '.join(SCHEDULE_KINDS)}")


def _check_names(models: Sequence[str]) -> None:
    """Raise ArenaError on an empty or repeated model name."""
    seen: set[str] = set()
    for m in models:
        if not m:
            raise ArenaError("a model in the schedule has an empty name")
        if m in seen:
            raise ArenaError(f"model {m!r} is listed twice in the schedule: give each model once")
        seen.add(m)


# --------------------------------------------------------------------------- adaptive schedule


class AdaptiveScheduler:
    """Batches of battles aimed at the pairs whose order is still uncertain.

    The loop: ``batch = s.next_batch()``; judge it (both orders); ``s.observe(battles)``;
    until ``next_batch`` returns ``[]``.

    How pairs are chosen:

    1. Warm-up: ``warmup_rounds`` random Hamiltonian cycles over the models, so every
       model plays 2 * ``warmup_rounds`` battles and the battle graph is connected before
       any fit.
    2. Then, before each batch, Bradley-Terry strengths are fitted on the observed counts
       (``rating.bt.fit_counts``, ties as half a win, ``prior_games`` virtual games so
       early fits stay finite) and their covariance from the Fisher information. What
       the schedule can reach is the full round robin's order, so the doubt about a pair
       (i, j) is measured against it: z = |theta_i - theta_j| / sqrt(V_res), where V_res is
       the part of the variance of theta_i - theta_j that the battles not yet played could
       still remove. The batch is filled one battle at a time with the pair whose battle
       most reduces the variance of the differences in doubt (each weighted by the normal
       density at its z, relative to V_res; see ``_choose``), updating the covariance
       after each pick. So a batch spreads over the uncertain pairs, and when two close
       models have used up their direct prompts it plays them against common opponents,
       as a round robin would.
    3. Exploration: a share ``explore`` of each batch goes to the pairs with the fewest
       battles so far, so no pair is written off on an early, noisy estimate.

    It stops (``next_batch`` returns ``[]``) when ``budget`` battles are scheduled, when
    no (prompt, pair) is left, or when every pair is ordered with |theta_i - theta_j| / SE
    >= ``stop_z``, SE its full standard error (pairs of equal strength never are, so the
    budget is what usually ends it).
    A (prompt, unordered pair) is never scheduled twice; a pair gets the prompt its two
    models have played least on (``_take``), so every model meets the whole prompt set.

    Costs are counted in battles; with both orders judged a battle is two judge calls.
    Deterministic for a given seed and sequence of observed battles.
    """

    def __init__(
        self,
        models: Sequence[str],
        prompt_ids: Sequence[str],
        *,
        batch_size: int = 64,
        budget: int | None = None,
        seed: int = 0,
        warmup_rounds: int = 2,
        explore: float = 0.1,
        stop_z: float = 3.0,
        prior_games: float = 1.0,
    ):
        """Set up the schedule.

        Args:
            models: the K >= 2 contestants.
            prompt_ids: the P prompts every pair may meet on.
            batch_size: battles per ``next_batch`` (the last may be smaller).
            budget: most battles to schedule in all; None = half the round robin, P * K(K-1)/4.
            seed: seed of the warm-up cycles, the prompt order of each pair and tie-breaks.
            warmup_rounds: random cycles over all models before the first fit.
            explore: share of each batch (after warm-up) given to the least-played pairs.
            stop_z: stop once every pair is ordered with |delta| / SE >= stop_z (inf: never).
            prior_games: virtual games per model against the average (keeps fits finite).
        """
        import numpy as np
        _check_names(models)
        if len(models) < 2:
            raise ArenaError(f"the adaptive schedule needs at least two models, got {len(models)}")
        if len(set(prompt_ids)) != len(prompt_ids):
            raise ArenaError("the adaptive schedule got a prompt id twice: give each prompt once")
        if not prompt_ids:
            raise ArenaError("the adaptive schedule got no prompts: build the test set first")
        if batch_size < 1:
            raise ArenaError(f"batch_size must be at least 1, not {batch_size}")
        if not 0.0 <= explore <= 1.0:
            raise ArenaError(f"explore must be between 0 and 1, not {explore}")
        if warmup_rounds < 0:
            raise ArenaError(f"warmup_rounds must be 0 or more, not {warmup_rounds}")
        if prior_games <= 0:
            raise ArenaError(f"prior_games must be positive, not {prior_games}")
        self.models = list(models)
        self.prompt_ids = list(prompt_ids)
        self.batch_size = batch_size
        self.seed = seed
        self.explore = explore
        self.stop_z = stop_z
        self.prior_games = prior_games
        k = len(self.models)
        self._index = {m: i for i, m in enumerate(self.models)}
        # pair p <-> (pi[p], pj[p]) with pi < pj, in all_pairs order
        self._pi, self._pj = (a.astype(np.int64) for a in np.triu_indices(k, 1))
        self._pair_of = np.full((k, k), -1, dtype=np.int64)
        self._pair_of[self._pi, self._pj] = np.arange(self.n_pairs)
        self._pair_of[self._pj, self._pi] = np.arange(self.n_pairs)
        self.round_robin = self.n_pairs * len(self.prompt_ids)
        self.budget = self.round_robin // 2 if budget is None else int(budget)
        if self.budget < 0:
            raise ArenaError(f"budget must be 0 or more battles, not {budget}")
        self._rng = np.random.default_rng(seed)
        self._used = np.zeros(self.n_pairs, dtype=np.int64)  # prompts taken per pair
        self._pending = np.zeros(self.n_pairs, dtype=np.int64)  # scheduled, not yet observed
        self._prompt_rank: dict[int, np.ndarray] = {}  # per pair; >= P once the prompt is taken
        self._model_prompt = np.zeros((k, len(self.prompt_ids)), dtype=np.int32)  # battles per model and prompt
        self._wins = np.zeros((k, k))  # wins[i, j]: battles i won against j
        self._ties = np.zeros((k, k))  # symmetric
        self._warmup = self._warmup_pairs(warmup_rounds)
        self._fit: tuple[np.ndarray, np.ndarray] | None = None
        self.scheduled = 0
        self.finished = False
        self.stop_reason = ""

    @property
    def n_pairs(self) -> int:
        return len(self.models) * (len(self.models) - 1) // 2

    # ---- the loop -------------------------------------------------------------
    def next_batch(self) -> list[ScheduledBattle]:
        """Return the next battles to judge as (prompt_id, model_a, model_b); [] when finished."""
        if self.finished:
            return []
        room = min(self.batch_size, self.budget - self.scheduled)
        if room <= 0:
            return self._finish("budget spent")
        left = len(self.prompt_ids) - self._used
        picks: list[int] = []
        while self._warmup and len(picks) < room:
            p = self._warmup.pop(0)
            if left[p] > 0:
                picks.append(p)
                left[p] -= 1
        if not picks:
            picks = self._choose(room, left)
            if not picks:
                return [] if self.finished else self._finish("nothing left to schedule")
        batch = [self._take(p) for p in picks]
        self.scheduled += len(batch)
        return batch

    def observe(self, battles: Sequence[Battle]) -> None:
        """Add judged battles to the counts the next fit uses.

        Every battle scheduled so far counts as settled afterwards: one whose games all
        failed is not scheduled again (its prompt is used up for the pair).
        """
        for b in battles:
            i, j = self._model(b.model_a, b), self._model(b.model_b, b)
            if i == j:
                raise ArenaError(f"battle on prompt {b.prompt_id!r} pits {b.model_a!r} against itself")
            if b.outcome == "model_a":
                self._wins[i, j] += 1
            elif b.outcome == "model_b":
                self._wins[j, i] += 1
            else:
                self._ties[i, j] += 1
                self._ties[j, i] += 1
        self._pending[:] = 0
        self._fit = None

    def ranking(self) -> list[str]:
        """Return the models best first by the current fit (config order before any battle)."""
        theta, _ = self._estimate()
        order = sorted(range(len(self.models)), key=lambda k: (-theta[k], k))
        return [self.models[k] for k in order]

    def uncertainty(self) -> dict[tuple[str, str], float]:
        """Return z = |delta| / SE of every pair (model_a before model_b in config order)."""
        z = self._z()
        return {(self.models[i], self.models[j]): float(v) for i, j, v in zip(self._pi, self._pj, z)}

    # ---- internals ------------------------------------------------------------
    def _finish(self, reason: str) -> list[ScheduledBattle]:
        self.finished = True
        self.stop_reason = reason
        return []

    def _model(self, name: str, b: Battle) -> int:
        try:
            return self._index[name]
        except KeyError:
            raise ArenaError(
                f"battle on prompt {b.prompt_id!r} names model {name!r}, which is not in the schedule "
                f"({', '.join(self.models)})"
            ) from None

    def _warmup_pairs(self, rounds: int) -> list[int]:
        """Return pair indices of ``rounds`` random Hamiltonian cycles over the models."""
        k = len(self.models)
        out: list[int] = []
        for _ in range(rounds):
            perm = self._rng.permutation(k)
            # a cycle of two models is one edge; from three on it has k edges
            edges = [(perm[0], perm[1])] if k == 2 else [(perm[t], perm[(t + 1) % k]) for t in range(k)]
            out.extend(int(self._pair_of[a, b]) for a, b in edges)
        return out

    def _take(self, pair: int) -> ScheduledBattle:
        """Give ``pair`` an unused prompt; return the battle.

        The prompt is one the two models have played least on so far (ties broken in a
        seeded random order per pair), so every model's battles spread over the whole
        prompt set and the models are compared on the same mix of prompts, as in the
        round robin.
        """
        import numpy as np
        a, b = int(self._pi[pair]), int(self._pj[pair])
        rank = self._prompt_rank.get(pair)
        if rank is None:
            # seeded per pair, so a pair's order does not depend on when it is first used
            rng = np.random.default_rng([self.seed, a, b])
            rank = self._prompt_rank[pair] = rng.permutation(len(self.prompt_ids))
        n_prompts = len(self.prompt_ids)
        cost = (self._model_prompt[a] + self._model_prompt[b]).astype(np.int64) * n_prompts + rank
        cost[rank >= n_prompts] = np.iinfo(np.int64).max  # taken for this pair
        k = int(np.argmin(cost))
        rank[k] = n_prompts + rank[k]  # mark taken, keep the order for the others
        self._model_prompt[a, k] += 1
        self._model_prompt[b, k] += 1
        self._used[pair] += 1
        self._pending[pair] += 1
        return self.prompt_ids[k], self.models[a], self.models[b]

    def _estimate(self) -> tuple[np.ndarray, np.ndarray]:
        """Return theta float64 (K,) and its Fisher information float64 (K, K), natural units."""
        import numpy as np
        if self._fit is None:
            from ..rating.bt import expit, fit_counts

            theta, _ = fit_counts(self._wins, self._ties, tie_model="half", prior_games=self.prior_games)
            n = self._wins + self._wins.T + self._ties
            # Fisher information of the half-tie BT likelihood with its prior (as in bt._fit)
            s = expit(theta)
            info = _laplacian(n * _game_information(theta, floor=0.0)) + np.diag(self.prior_games * s * (1.0 - s))
            self._fit = theta, info
        return self._fit

    def _pair_variance(self, cov: np.ndarray) -> np.ndarray:
        """Return Var(theta_i - theta_j) float64 (n_pairs,) from the covariance (K, K)."""
        import numpy as np
        d = np.diag(cov)
        return np.maximum(d[self._pi] + d[self._pj] - 2.0 * cov[self._pi, self._pj], 1e-12)

    def _z(self) -> np.ndarray:
        """Return |theta_i - theta_j| / SE float64 (n_pairs,) under the current fit."""
        import numpy as np
        theta, info = self._estimate()
        var = self._pair_variance(np.linalg.pinv(info))
        return np.abs(theta[self._pi] - theta[self._pj]) / np.sqrt(var)

    def _choose(self, room: int, left: np.ndarray) -> list[int]:
        """Return up to ``room`` pair indices (repeats allowed) for the next batch.

        The target is the order the full round robin of these prompts would give, the most
        any schedule can reach. For a pair (i, j), V is the variance of the estimated
        difference now and V_all what it would be had every remaining (prompt, pair) been
        played; for nested fits the variance of the difference of the two estimates is the
        difference of the variances, so V_res = V - V_all is how far the remaining battles
        can still move the pair's difference, and z_res = |delta| / sqrt(V_res) says how
        likely they are to flip its order. A pair whose remaining battles cannot flip it
        (its direct prompts used up and the common opponents it needs already played) then
        weighs nothing, however uncertain it still is against the truth.

        Exploitation picks, one battle at a time, the pair whose battle most reduces
        sum_ij w_ij Var(theta_i - theta_j), with w_ij = phi(z_res) / V_res (phi the normal
        density; V_res at the start of the batch): the relative variance of the
        differences whose order can still change, a pair counting less the clearer its
        order. A battle (a, b) adds information v_ab = p(1-p) along e_a - e_b, so by
        Sherman-Morrison it reduces Var(c' theta) by v (c' S e)^2 / (1 + v e' S e) for
        covariance S, and summed with weights that is v e' S L_w S e / (1 + v e' S e), L_w
        the weighted Laplacian of the pairs. Unlike "play the most uncertain pair", this
        also plays i and j against common opponents once their direct prompts run out.

        Sets ``stop_reason`` and returns [] when no pair should play.
        """
        import numpy as np
        if not (left > 0).any():
            self._finish("every (prompt, pair) scheduled")
            return []
        theta, info = self._estimate()
        gain = _game_information(theta)[self._pi, self._pj]  # (n_pairs,)
        # battles scheduled but not yet observed count as information already on its way
        info = info + _laplacian(self._pair_matrix(self._pending * gain))
        cov = np.linalg.pinv(info)
        var = self._pair_variance(cov)
        delta = np.abs(theta[self._pi] - theta[self._pj])
        z = delta / np.sqrt(var)
        if (z >= self.stop_z).all():
            self._finish(f"every pair is ordered with |delta|/SE >= {self.stop_z:g}")
            return []
        var_all = self._pair_variance(np.linalg.pinv(info + _laplacian(self._pair_matrix(left * gain))))
        residual = np.maximum(var - var_all, 1e-12 * var)
        z_res = delta / np.sqrt(residual)
        weights = np.where(z < self.stop_z, np.exp(-0.5 * z_res * z_res), 0.0) / residual
        lw = _laplacian(self._pair_matrix(weights))
        tiebreak = self._rng.random(self.n_pairs)  # a seeded choice among equal scores
        left = left.copy()
        n_explore = round(self.explore * room)
        picks: list[int] = []
        pi, pj = self._pi, self._pj
        while len(picks) < room - n_explore:
            g = cov @ lw @ cov
            quad = np.diag(g)[pi] + np.diag(g)[pj] - 2.0 * g[pi, pj]
            spread = np.diag(cov)[pi] + np.diag(cov)[pj] - 2.0 * cov[pi, pj]
            score = np.where(left > 0, gain * quad / (1.0 + gain * spread) * (1.0 + 1e-9 * tiebreak), -np.inf)
            q = int(np.argmax(score))
            if not np.isfinite(score[q]):
                break
            picks.append(q)
            left[q] -= 1
            u = cov[:, pi[q]] - cov[:, pj[q]]
            cov = cov - (gain[q] / (1.0 + gain[q] * spread[q])) * np.outer(u, u)
        # explore: the least-played pairs (observed + pending + picked in this batch)
        played = (self._wins + self._wins.T + self._ties)[pi, pj] + self._pending
        played = played + np.bincount(picks, minlength=self.n_pairs)
        heap = [(float(played[q]), float(tiebreak[q]), int(q)) for q in np.flatnonzero(left > 0)]
        heapq.heapify(heap)
        while heap and len(picks) < room:
            n, tb, q = heapq.heappop(heap)
            picks.append(q)
            left[q] -= 1
            if left[q] > 0:
                heapq.heappush(heap, (n + 1.0, tb, q))
        return picks

    def _pair_matrix(self, values: np.ndarray) -> np.ndarray:
        """Return the symmetric float64 (K, K) matrix holding per-pair ``values`` (n_pairs,)."""
        import numpy as np
        k = len(self.models)
        out = np.zeros((k, k))
        out[self._pi, self._pj] = values
        out[self._pj, self._pi] = values
        return out


def _game_information(theta: np.ndarray, floor: float = 0.01) -> np.ndarray:
    """Return p(1-p) float64 (K, K): the information one battle adds to theta_i - theta_j.

    The default floor keeps a pair the fit thinks lopsided worth something when
    choosing battles (an early fit can be far off); the Fisher information uses 0.
    """
    import numpy as np

    from ..rating.bt import expit  # numpy's; scipy.special would cost every command ~0.2 s at start-up

    p = expit(theta[:, None] - theta[None, :])
    return np.maximum(p * (1.0 - p), floor)


def _laplacian(weights: np.ndarray) -> np.ndarray:
    """Return the graph Laplacian float64 (K, K) of symmetric edge ``weights`` (K, K)."""
    import numpy as np
    w = weights - np.diag(np.diag(weights))
    return np.diag(w.sum(1)) - w


def run_schedule(
    scheduler: AdaptiveScheduler, judge: Callable[[list[ScheduledBattle]], Sequence[Battle]]
) -> list[Battle]:
    """Run ``scheduler`` to the end with ``judge`` (batch -> battles); return every battle judged."""
    out: list[Battle] = []
    while batch := scheduler.next_batch():
        battles = list(judge(batch))
        scheduler.observe(battles)
        out.extend(battles)
    return out
