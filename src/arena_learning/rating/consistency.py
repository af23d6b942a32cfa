"""Consistency of a leaderboard with a reference leaderboard.

The metrics of the Arena-Hard paper (Li et al., 2024) and of WizardArena (Arena Learning,
2024), on two boards of ``Rating`` records (``rating`` is the score, higher is better;
``ci_low``/``ci_high`` its 95% interval, when known):

* Spearman and Kendall (tau-b) correlation of the scores over the models on both boards.
* Agreement with 95% CI: over the pairs the *reference* orders confidently (intervals do
  not overlap), +1 when the candidate orders them the same way confidently, -1 when it
  orders them the other way confidently, 0 when it does not separate them (its intervals
  overlap, or it has no interval for one of the two models); averaged.
* Separability with 95% CI: the share of model pairs whose intervals do not overlap.
* Pair-rank Brier score: over the pairs the reference orders confidently, the squared error
  of the candidate's probability that the reference's better model is better, taken from
  the candidate's intervals as normal errors: P = Phi((s_i - s_j) / sqrt(se_i^2 + se_j^2)),
  se = (ci_high - ci_low) / (2 * 1.96). 0 is perfect, 0.25 is a coin.
* WizardArena's average consistency: the mean of Spearman, agreement and the candidate's
  separability.

Model names are matched across boards (``match_names``) exactly first, then by an aliases
table the user gives, then loosely: the organisation prefix (``mistralai/``), case, ``-hf``
and separators (``-``, ``_``, spaces) ignored, the version number (``v0.1``) compared on its
own. Two different version numbers never match (``v0.2`` is not ``v0.1``); a name with a
version matches one without only when nothing closer does, and every match that is not exact
is reported with how it was made.

Two intervals "overlap" unless one lies strictly above the other. A model without an
interval separates from nobody. The reference decides which pairs are judged: a pair the
reference cannot separate (no interval, or overlapping ones) is left out of the agreement.
The candidate is judged on every such pair: one it cannot separate because it lacks an
interval scores 0, exactly like one whose intervals overlap, so a candidate cannot raise its
agreement by withholding intervals. Separability is a property of one board and is taken
over the models that have an interval.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from itertools import combinations

import numpy as np
from scipy import stats

from ..errors import ArenaError
from ..records import Rating

MATCH_CHOICES = ("loose", "exact")


def loose_name(name: str) -> str:
    """Return the name used to match models across boards: lower case, ``_`` as ``-``, no spaces."""
    return "".join(name.lower().replace("_", "-").split())


_VERSION = re.compile(r"(?:^|[-_ .])v(\d+(?:\.\d+)*)(?=$|[-_ ])")
_HF_SUFFIX = re.compile(r"[-_]hf$")


def name_key(name: str) -> tuple[str, str | None]:
    """Return (base, version) of a model name for loose matching.

    ``mistralai/Mixtral-8x7B-Instruct-v0.1`` -> ("mixtral8x7binstruct", "0.1"),
    ``Llama-2-70b-chat-hf`` -> ("llama270bchat", None), ``gpt4_1106_preview`` -> ("gpt41106preview", None).
    """
    s = name.strip().lower().rsplit("/", 1)[-1]
    s = _HF_SUFFIX.sub("", s)
    versions = _VERSION.findall(s)
    version = versions[-1] if versions else None
    if version is not None:
        s = _VERSION.sub("", s)
    return re.sub(r"[-_\s]+", "", s), version


@dataclass
class NameMatch:
    """How the names of a candidate board met those of the reference."""

    pairs: list[tuple[str, str, str]] = field(default_factory=list)  # (candidate, reference, how)
    only_in_candidate: list[str] = field(default_factory=list)
    only_in_reference: list[str] = field(default_factory=list)
    refused: list[tuple[str, str, str]] = field(default_factory=list)  # (candidate, reference, why not)

    @property
    def not_exact(self) -> list[tuple[str, str, str]]:
        return [p for p in self.pairs if p[2] != "exact"]


def match_names(candidate: Sequence[str], reference: Sequence[str], *, match: str = "loose",
                aliases: Mapping[str, str] | None = None) -> NameMatch:
    """Return which candidate name is which reference name (see the module docstring).

    ``aliases``: name -> name, either way round (a candidate's name to the reference's, or back).
    ``match="exact"``: exact names and aliases only.
    """
    if match not in MATCH_CHOICES:
        raise ArenaError(f"unknown match option {match!r}: use one of {', '.join(MATCH_CHOICES)}")
    out = NameMatch()
    cand_left = list(dict.fromkeys(candidate))
    ref_left = list(dict.fromkeys(reference))

    def take(c: str, r: str, how: str) -> None:
        out.pairs.append((c, r, how))
        cand_left.remove(c)
        ref_left.remove(r)

    for c in [c for c in cand_left if c in ref_left]:
        take(c, c, "exact")
    for a, b in (aliases or {}).items():
        for c, r in ((a, b), (b, a)):
            if c in cand_left and r in ref_left:
                take(c, r, "alias")
    if match == "loose":
        for how, key in (("loose", name_key), ("version dropped", lambda n: (name_key(n)[0], None))):
            c_keys: dict[tuple[str, str | None], list[str]] = {}
            r_keys: dict[tuple[str, str | None], list[str]] = {}
            for c in cand_left:
                c_keys.setdefault(key(c), []).append(c)
            for r in ref_left:
                r_keys.setdefault(key(r), []).append(r)
            for k, cs in c_keys.items():
                rs = r_keys.get(k, [])
                if len(cs) != 1 or len(rs) != 1:
                    continue  # ambiguous (or absent): left unmatched, never guessed
                (c,), (r,) = cs, rs
                vc, vr = name_key(c)[1], name_key(r)[1]
                if vc is not None and vr is not None and vc != vr:
                    out.refused.append((c, r, f"different versions (v{vc}, v{vr}); match them with --aliases "
                                              "if they are one model"))
                    continue
                take(c, r, how if vc == vr else "version dropped")
    out.only_in_candidate = sorted(cand_left)
    out.only_in_reference = sorted(ref_left)
    return out


@dataclass
class Consistency:
    """How well a candidate board agrees with a reference board (see the module docstring).

    Every metric is None when too few models or pairs support it.
    """

    models: list[str]
    spearman: float | None
    kendall: float | None
    agreement: float | None
    agreement_pairs: int
    separability: float | None
    separability_reference: float | None
    separable_pairs: int
    brier: float | None
    average: float | None
    only_in_candidate: list[str] = field(default_factory=list)
    only_in_reference: list[str] = field(default_factory=list)
    matches: list[tuple[str, str, str]] = field(default_factory=list)  # (candidate, reference, how)
    refused: list[tuple[str, str, str]] = field(default_factory=list)  # names not matched: (cand, ref, why)
    no_interval_candidate: int = 0  # models on both boards without an interval on the candidate
    no_interval_reference: int = 0

    @property
    def n_models(self) -> int:
        return len(self.models)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["n_models"] = self.n_models
        return out


def separated(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Return int8 (K, K): +1 where i is confidently above j, -1 where below, 0 otherwise.

    ``lo``, ``hi``: float (K,) interval bounds; NaN (no interval) gives 0.
    """
    with np.errstate(invalid="ignore"):
        above = lo[:, None] > hi[None, :]
        below = hi[:, None] < lo[None, :]
    return above.astype(np.int8) - below.astype(np.int8)


def separability(lo: np.ndarray, hi: np.ndarray) -> float | None:
    """Return the share of pairs of models (with intervals) whose intervals do not overlap."""
    ok = ~(np.isnan(lo) | np.isnan(hi))
    lo, hi = lo[ok], hi[ok]
    k = lo.shape[0]
    if k < 2:
        return None
    sep = separated(lo, hi)
    iu = np.triu_indices(k, 1)
    return float((sep[iu] != 0).mean())


def agreement_with_ci(
    cand_lo: np.ndarray, cand_hi: np.ndarray, ref_lo: np.ndarray, ref_hi: np.ndarray
) -> tuple[float | None, int]:
    """Return (agreement, number of pairs the reference separates); arrays float (K,) aligned by model.

    The agreement (Arena-Hard's and WizardArena's "agreement with 95% CI") is the mean,
    over every pair the reference separates confidently, of +1 when the candidate separates
    it confidently in the same direction, -1 when it separates it confidently the other
    way, and 0 otherwise. "Otherwise" includes a candidate model without an interval
    (NaN bounds): such a pair is not separated by the candidate, so it scores 0 and stays
    in the mean; dropping it would let missing intervals inflate the agreement. None when
    the reference separates no pair.
    """
    ref = separated(ref_lo, ref_hi)
    cand = separated(cand_lo, cand_hi)  # NaN bounds give 0: not separated
    iu = np.triu_indices(ref.shape[0], 1)
    judged = ref[iu] != 0
    n = int(judged.sum())
    if n == 0:
        return None, 0
    return float((ref[iu][judged] * cand[iu][judged]).mean()), n


def pair_rank_brier(
    cand_score: np.ndarray,
    cand_lo: np.ndarray,
    cand_hi: np.ndarray,
    ref_score: np.ndarray,
    ref_lo: np.ndarray,
    ref_hi: np.ndarray,
    *,
    ci: float = 0.95,
) -> float | None:
    """Return the pair-rank Brier score (see the module docstring); arrays float (K,) aligned.

    Pairs: those the reference separates confidently when it has intervals, otherwise all
    pairs it orders strictly. A candidate without intervals predicts 1, 0.5 or 0.
    """
    k = ref_score.shape[0]
    if k < 2:
        return None
    z = stats.norm.ppf(0.5 + ci / 2.0)
    ref_has_ci = ~(np.isnan(ref_lo) | np.isnan(ref_hi))
    ref_sep = separated(ref_lo, ref_hi)
    se = np.where(np.isnan(cand_lo) | np.isnan(cand_hi), 0.0, (cand_hi - cand_lo) / (2.0 * z))
    errors = []
    for i, j in combinations(range(k), 2):
        if ref_has_ci[i] and ref_has_ci[j]:
            truth = ref_sep[i, j]
        else:
            truth = int(np.sign(ref_score[i] - ref_score[j]))
        if truth == 0:
            continue
        gap = cand_score[i] - cand_score[j]
        spread = math.hypot(se[i], se[j])
        p_i_above = stats.norm.cdf(gap / spread) if spread > 0 else 0.5 * (1.0 + float(np.sign(gap)))
        errors.append((p_i_above - (1.0 if truth > 0 else 0.0)) ** 2)
    return float(np.mean(errors)) if errors else None


def compare_boards(
    candidate: Sequence[Rating],
    reference: Sequence[Rating],
    *,
    match: str = "loose",
    ci: float = 0.95,
    aliases: Mapping[str, str] | None = None,
) -> Consistency:
    """Return the consistency of ``candidate`` with ``reference`` over the models on both.

    Names are matched by ``match_names`` (``match``: ``loose`` or ``exact``; ``aliases``).
    """
    cand = _index(candidate, "candidate")
    ref = _index(reference, "reference")
    names = match_names(list(cand), list(ref), match=match, aliases=aliases)
    models = [c for c, _, _ in names.pairs]

    def arrays(board: dict[str, Rating], keys: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        score = np.array([board[k].rating for k in keys], dtype=np.float64)
        lo = np.array([np.nan if board[k].ci_low is None else board[k].ci_low for k in keys], dtype=np.float64)
        hi = np.array([np.nan if board[k].ci_high is None else board[k].ci_high for k in keys], dtype=np.float64)
        return score, lo, hi

    cs, cl, ch = arrays(cand, models)
    rs, rl, rh = arrays(ref, [r for _, r, _ in names.pairs])
    shared = models
    spearman = kendall = None
    if len(shared) >= 3 and np.ptp(cs) > 0 and np.ptp(rs) > 0:
        spearman = float(stats.spearmanr(cs, rs).statistic)
        kendall = float(stats.kendalltau(cs, rs).statistic)
    agreement, n_agree = agreement_with_ci(cl, ch, rl, rh)
    sep_c = separability(cl, ch)
    sep_r = separability(rl, rh)
    n_sep = int(np.triu(separated(cl, ch) != 0, 1).sum())
    brier = pair_rank_brier(cs, cl, ch, rs, rl, rh, ci=ci)
    average = None
    if spearman is not None and agreement is not None and sep_c is not None:
        average = float(np.mean([spearman, agreement, sep_c]))
    return Consistency(
        models=models,
        spearman=spearman,
        kendall=kendall,
        agreement=agreement,
        agreement_pairs=n_agree,
        separability=sep_c,
        separability_reference=sep_r,
        separable_pairs=n_sep,
        brier=brier,
        average=average,
        only_in_candidate=names.only_in_candidate,
        only_in_reference=names.only_in_reference,
        matches=names.pairs,
        refused=names.refused,
        no_interval_candidate=int((np.isnan(cl) | np.isnan(ch)).sum()),
        no_interval_reference=int((np.isnan(rl) | np.isnan(rh)).sum()),
    )


def _index(board: Sequence[Rating], which: str) -> dict[str, Rating]:
    out: dict[str, Rating] = {}
    for r in board:
        if r.model in out:
            raise ArenaError(f"the {which} board lists model {r.model!r} twice: keep one row")
        if not math.isfinite(r.rating):
            raise ArenaError(f"the {which} board has no finite score for model {r.model!r}")
        out[r.model] = r
    return out
