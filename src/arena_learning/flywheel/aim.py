"""Aimed slices (``allocate: weakness``): a round's slice spends its prompts where the model is behind.

Arena Learning's loop is meant "to enhance the weaker aspects of the model"; a uniform slice spends
most of its prompts where the target already wins. An aimed slice is drawn when its first stage
starts, from the pool's unused prompts of the slice (task slices: candidates made with the slice's
seed; stored sets: the set beyond ``limit``), in three steps:

- **gaps**: per group (task categories; a stored set's categories, else its clusters) the start
  model's paired gap to the best reference on the test set's battles of the last evaluation
  (``rating.gaps``: bootstrap over the group's prompts, Holm's correction for the verdicts);
- **shares**: each group first gets the **floor**, half of its uniform share (``n / groups``), so
  no group goes to zero and nothing the model knows is left unpractised (half, not less, because a
  group within chance today may be behind tomorrow, and the replay of earlier rounds covers the
  rest); the other half of the slice goes to the groups in proportion to how far the model is
  behind (the point gap in rating points: the allocation is a decision, not a claim, and the floor
  absorbs the noise). A group with no gap measured counts as the mean deficit; with no deficit
  anywhere (or no evaluation yet) the slice is uniform. A group short of candidates passes its
  excess on;
- **draw**: each group's first prompts in the candidates' order (made by the seed), so the draw
  is deterministic and, with no deficit, the uniform slice itself. The size is the slice's.

``allocate: learnable`` weighs each group's deficit by how far the training that made the model
moved it there (``moved``): the model's mean score against the references on the group's test
prompts minus the mean score of the model that training started from, on the same prompts against
the same references (win 1, tie 1/2, loss 0). A group far behind where training moves nothing (a
task too hard for the model, or one it has learned as far as it can) then keeps its floor, and the
rest goes where examples have paid. A score share, not a rating difference, because a group the
model loses entirely puts its rating at the prior's mercy. With no model before (the base), no test
battles of both models, or no movement where the model is behind, the weights are the deficits
alone, as ``weakness``, and the allocation's line says which.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..flywheel_state import Allocation, GroupShare
from ..rating.gaps import GapReport
from ..rating.groups import group_battles, prompt_groups
from ..records import Battle, Prompt

FLOOR_SHARE = 0.5
"""The share of its uniform share every group keeps (see the module docstring)."""

AIMED_RULES = ("weakness", "learnable")
"""The rules that spend a slice by the model's gaps (``even``: the control arm, drawn as they draw, evenly)."""


def group_by(prompts: Sequence[Prompt]) -> str:
    """Return how a slice's prompts are grouped: ``category`` when every prompt has one, else ``cluster``."""
    return "category" if prompts and all(p.category for p in prompts) else "cluster"


def groups_of(prompts: Sequence[Prompt], by: str) -> dict[str, list[Prompt]]:
    """Return group -> its prompts in the given order, groups in order of first appearance (none: ``"-"``)."""
    out: dict[str, list[Prompt]] = {}
    for p in prompts:
        out.setdefault((prompt_groups(p, by) or ["-"])[0], []).append(p)
    return out


def uniform(n: int, groups: Sequence[str]) -> dict[str, int]:
    """Return ``n`` split evenly over ``groups`` (the first ``n % len`` get one more), as ``task_slice`` splits."""
    k = len(groups)
    return {g: n // k + (1 if i < n % k else 0) for i, g in enumerate(groups)} if k else {}


def floor_of(n: int, k: int) -> int:
    """Return the fewest prompts a group of an aimed slice of ``n`` over ``k`` groups gets: half its share, >= 1."""
    return 0 if k == 0 else min(n // k, max(1, int(FLOOR_SHARE * n / k)))


def shares(deficits: Mapping[str, float], available: Mapping[str, int], n: int) -> dict[str, int]:
    """Return prompts per group: the floor each, the rest in proportion to ``deficits`` (rating points behind, >= 0).

    ``available`` caps each group (its candidates); what a capped group cannot take goes to the others (by
    deficit, then evenly). Largest remainders, ties by group name, so the result is deterministic. The sum is
    ``min(n, sum(available))``.
    """
    groups = sorted(g for g, a in available.items() if a > 0)
    floor = floor_of(n, len(groups))
    got = {g: min(floor, available[g]) for g in groups}
    rest = min(n, sum(available[g] for g in groups)) - sum(got.values())
    while rest > 0:
        open_ = [g for g in groups if got[g] < available[g]]
        weight = {g: max(0.0, deficits.get(g, 0.0)) for g in open_}
        if sum(weight.values()) <= 0:
            weight = dict.fromkeys(open_, 1.0)
        total = sum(weight.values())
        exact = {g: rest * w / total for g, w in weight.items()}
        add = {g: int(x) for g, x in exact.items()}
        for g in sorted(open_, key=lambda g: (-(exact[g] - add[g]), g))[: rest - sum(add.values())]:
            add[g] += 1
        given = 0
        for g in open_:
            take = min(add[g], available[g] - got[g])
            got[g] += take
            given += take
        rest -= given
    return got


def draw(candidates: Sequence[Prompt], by: str, counts: Mapping[str, int]) -> list[Prompt]:
    """Return each group's first ``counts[group]`` candidates, interleaved group by group (as ``task_slice``)."""
    picked = [members[: counts.get(g, 0)] for g, members in groups_of(candidates, by).items()]
    out: list[Prompt] = []
    for k in range(max((len(v) for v in picked), default=0)):
        out.extend(v[k] for v in picked if k < len(v))
    return out


def moved(battles: Sequence[Battle], prompts: Sequence[Prompt], by: str, model: str, before: str,
          references: Sequence[str]) -> dict[str, float]:
    """Return per group how far training moved ``model`` from ``before`` (``allocate: learnable``).

    Per group of the test ``prompts``: ``model``'s mean score against ``references`` (win 1, tie 1/2, loss 0,
    battles weighted) minus ``before``'s, over the prompts where both met a reference. Groups where either has
    no such battle are left out.
    """
    refs = set(references)

    def shares_of(bs: Sequence[Battle], who: str) -> dict[str, tuple[float, float]]:
        out: dict[str, tuple[float, float]] = {}  # prompt -> (score, weight)
        for b in bs:
            if who not in (b.model_a, b.model_b) or (b.model_b if b.model_a == who else b.model_a) not in refs:
                continue
            won = 0.5 if b.outcome == "tie" else float((b.outcome == "model_a") == (b.model_a == who))
            s, w = out.get(b.prompt_id, (0.0, 0.0))
            out[b.prompt_id] = (s + won * b.weight, w + b.weight)
        return out

    result: dict[str, float] = {}
    for group, bs in group_battles(battles, prompts, by).items():
        now, then = shares_of(bs, model), shares_of(bs, before)
        both = [pid for pid in now if pid in then and now[pid][1] > 0 and then[pid][1] > 0]
        if both:
            result[group] = sum(now[p][0] / now[p][1] - then[p][0] / then[p][1] for p in both) / len(both)
    return result


def aim(candidates: Sequence[Prompt], n: int, gaps: GapReport | None, *, model: str, basis: str, stage: str = "",
        rule: str = "weakness", why_none: str = "", movement: Mapping[str, float] | None = None,
        before: str | None = None) -> tuple[list[Prompt], Allocation]:
    """Return the aimed slice of ``n`` prompts drawn from ``candidates`` and how it was spent.

    ``gaps``: ``model``'s per-group gaps to the best reference on the test set, grouped as the candidates
    are (``group_by``); None (no evaluation of the model yet: ``why_none`` says why) gives the uniform slice.
    ``rule`` ``even`` (the control arm) records the gaps and draws the uniform slice from the same candidates;
    ``learnable`` weighs the gaps by ``movement`` (``moved``: per group, how far the training that made
    ``model`` moved it from ``before``).
    """
    by = gaps.by if gaps is not None else group_by(candidates)
    members = groups_of(candidates, by)
    even = uniform(n, list(members))
    available = {g: len(v) for g, v in members.items()}
    measured = {g.group: g for g in (gaps.groups if gaps is not None else [])}
    deficit = {g: max(0.0, -row.best.delta) for g, row in measured.items() if row.best is not None and g in members}
    mean = sum(deficit.values()) / len(deficit) if deficit else 0.0
    weights = {g: deficit.get(g, mean) for g in members}
    paid = {g: max(0.0, v) for g, v in (movement or {}).items() if g in members}
    learn = False
    if rule == "learnable" and paid:  # a group with no movement measured counts as the mean movement
        mean_paid = sum(paid.values()) / len(paid)
        product = {g: w * paid.get(g, mean_paid) for g, w in weights.items()}
        if any(product.values()):
            weights, learn = product, True
    aimed = rule in AIMED_RULES and any(weights.values())
    counts = shares(weights, available, n) if aimed else _uniform_capped(even, available, n)
    if rule not in AIMED_RULES:
        why = f"{rule}: the control arm, drawn from the same candidates as an aimed slice"
    elif gaps is None:
        why = f"uniform: {why_none}"
    elif not deficit:
        why = f"uniform: no group of the slice has a gap measured on the test set (grouped by {by})"
    elif not any(weights.values()):
        why = f"uniform: {model} is behind {gaps.best_other} in no group of the test set"
    else:
        behind = sorted((g for g in deficit if deficit[g] > 0), key=lambda g: -deficit[g])
        why = (f"{len(behind)} of {len(members)} groups behind {gaps.best_other} on the test set; each group at "
               f"least {floor_of(n, len(members))}, the rest by rating points behind")
        if learn:
            top = sorted((g for g in weights if weights[g] > 0), key=lambda g: -weights[g])
            why += (f" times how far training moved {model} from {before} there (most: "
                    + ", ".join(f"{g} {deficit.get(g, mean):.0f} x {paid.get(g, 0.0):+.2f}" for g in top[:3]) + ")")
        else:
            if rule == "learnable":
                why += (f" alone (no model before {model} to measure learning)" if before is None else
                        f" alone ({model} and {before} met the references on no test prompt of a group)"
                        if not movement else
                        f" alone (training moved {model} from {before} in no group where it is behind)")
            why += " (most: " + ", ".join(f"{g} {deficit[g]:.0f}" for g in behind[:3]) + ")"
    rows = []
    for g in members:
        row = measured.get(g)
        best = row.best if row is not None else None
        rows.append(GroupShare(group=g, label=row.label if row is not None else None, prompts=counts.get(g, 0),
                               uniform=even[g], candidates=available[g],
                               gap=None if best is None else round(best.delta, 1),
                               ci_low=None if best is None or best.ci_low is None else round(best.ci_low, 1),
                               ci_high=None if best is None or best.ci_high is None else round(best.ci_high, 1),
                               verdict=row.verdict if row is not None else "not on the test set",
                               moved=round(movement[g], 3) if movement is not None and g in movement else None))
    alloc = Allocation(rule=rule, by=by, stage=stage, model=model, best=gaps.best_other if gaps is not None else None,
                       floor=floor_of(n, len(members)), basis=basis, why=why, groups=rows)
    return draw(candidates, by, counts), alloc


def _uniform_capped(even: Mapping[str, int], available: Mapping[str, int], n: int) -> dict[str, int]:
    """Return the uniform split, a group short of candidates passing its excess on evenly."""
    if all(even[g] <= available[g] for g in even):
        return dict(even)
    return shares({}, available, n)
