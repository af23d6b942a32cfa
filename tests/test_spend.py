"""Spend: each call's price in the ledger (stage, batch flag, USD), `arena info`'s sums against the tokens the
server itself reported, and `spend_limit`, which stops a run before a call could pass it and resumes from the
ledger when raised, with no call paid twice. Real endpoints on 127.0.0.1 (scripted replies and usage)."""

from __future__ import annotations

import json
import sqlite3

import pytest
import yaml

from arena_learning.config import ModelSpec
from arena_learning.engines.spend import SpendGuard, call_cost, check_spend, settle_spend, spend_summary, spending
from arena_learning.errors import SpendLimitReached
from arena_learning.records import Prompt
from arena_learning.store import SCHEMA_VERSION, Store

from .conftest import REPO, Reply, arena
from .test_judge_runs import scripted_judge

PRICES = {"a": (2.0, 8.0), "b": (3.0, 12.0), "judge": (1.0, 2.0)}  # USD per 1M tokens in, out


def usage(body) -> tuple[int, int]:
    """The usage a scripted server reports for ``body``: its own count, not the client's estimate."""
    user = body["messages"][-1]["content"]
    return len(json.dumps(body["messages"])) // 4, 7 + len(user) % 5


def contestant(text):
    return lambda body: Reply(text, usage=usage(body))


def judge_with_usage(body):
    reply = scripted_judge(body)
    reply.usage = usage(body)
    return reply


def spec(name, url, max_tokens=32):
    price_in, price_out = PRICES[name]
    return {"name": name, "engine": "openai", "model": f"m-{name}", "base_url": url, "price_in": price_in,
            "price_out": price_out, "params": {"max_tokens": max_tokens}}


@pytest.fixture
def servers(scripted_server):
    return {"a": scripted_server(contestant("a good answer")), "b": scripted_server(contestant("a weak answer")),
            "judge": scripted_server(judge_with_usage)}


def run_config(tmp_path, servers, **extra):
    prompts = [Prompt(id=f"p{i}", turns=[f"Question number {i}" + "?" * i]) for i in range(6)]
    with Store(tmp_path / "ws") as store:
        store.put_prompts("open", prompts)
    data = {"name": "spend", "prompts": {"set": "open"},
            "models": [spec("a", servers["a"].url), spec("b", servers["b"].url)],
            "judge": {"kind": "llm", "name": "pj", "retries": 0, "model": spec("judge", servers["judge"].url, 64)},
            "battles": {"schedule": "all"}, **extra}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def server_usd(server, name) -> float:
    price_in, price_out = PRICES[name]
    return sum(usage(b)[0] * price_in + usage(b)[1] * price_out for b in server.bodies) / 1e6


def test_info_shows_the_spend_per_model_stage_and_judge_at_the_servers_own_token_counts(tmp_path, servers):
    cfg = run_config(tmp_path, servers)
    ran = arena("run", cfg, "-w", tmp_path / "ws", cwd=REPO)
    assert ran.returncode == 0, ran.stderr
    info = arena("info", tmp_path / "ws", "--json")
    assert info.returncode == 0, info.stderr
    spend = json.loads(info.stdout)["spend"]
    for name in ("a", "b", "judge"):
        assert servers[name].requests > 0
        assert spend["by_model"][name]["calls"] == servers[name].requests
        assert spend["by_model"][name]["usd"] == pytest.approx(server_usd(servers[name], name), rel=0.01)
        assert spend["by_model"][name]["tokens_in"] == sum(usage(b)[0] for b in servers[name].bodies)
    assert spend["by_stage"]["answers"]["calls"] == 12  # 6 prompts x 2 contestants
    # the judge's calls: the battles (6 prompts x 1 pair x 2 orders) and the canaries beside them
    assert spend["by_stage"]["battles"]["calls"] == 12
    assert spend["by_judge"]["judge"]["calls"] == servers["judge"].requests
    assert spend["by_stage"]["battles"]["calls"] + spend["by_stage"].get("canaries", {"calls": 0})["calls"] == \
        servers["judge"].requests
    assert spend["usd"] == pytest.approx(sum(server_usd(servers[n], n) for n in PRICES), rel=1e-6)
    assert spend["batch_calls"] == 0 and spend["unpriced"] == 0
    table = arena("info", tmp_path / "ws")
    assert table.returncode == 0 and "spend" in table.stdout and f"{spend['usd']:.4f}" in table.stdout


def test_a_spend_limit_stops_the_run_keeps_what_was_done_and_resumes_when_raised(tmp_path, servers):
    # Each contestant call can cost at most ~2.7e-4 USD (its prompt estimated, 32 tokens out at 8 USD / 1M):
    # a limit of 6e-4 lets two calls go out, and no more.
    cfg = run_config(tmp_path, servers, spend_limit={"usd": 0.0006})
    stopped = arena("run", cfg, "-w", tmp_path / "ws", cwd=REPO)
    assert stopped.returncode == 2
    assert "spend limit reached" in stopped.stderr and "raise spend_limit.usd" in stopped.stderr
    assert (servers["a"].requests, servers["b"].requests, servers["judge"].requests) == (2, 0, 0)
    with Store(tmp_path / "ws", readonly=True) as store:
        rows = store.spend_rows()
        assert sum(r["calls"] for r in rows) == 2  # what came back is in the ledger: nothing lost
        assert store.spent_usd() <= 0.0006
        assert store.spent_usd() == pytest.approx(server_usd(servers["a"], "a"))
    resumed = arena("run", cfg, "-w", tmp_path / "ws", "--set", "spend_limit.usd=1", cwd=REPO)
    assert resumed.returncode == 0, resumed.stderr
    # the two calls of the stopped run were not sent again: 6 answers each, every judge call once
    assert (servers["a"].requests, servers["b"].requests) == (6, 6)
    keys = {json.dumps(b, sort_keys=True) for s in servers.values() for b in s.bodies}
    assert len(keys) == sum(s.requests for s in servers.values())
    with Store(tmp_path / "ws", readonly=True) as store:
        assert store.call_counts() == {"ok": sum(s.requests for s in servers.values())}
        assert store.spent_usd() == pytest.approx(sum(server_usd(servers[n], n) for n in PRICES))


def test_the_guard_holds_calls_in_flight_at_their_upper_bound_and_batches_check_whole(tmp_path):
    guard = SpendGuard(1.0, 0.25, "ws")
    assert guard.reserve(0.5) and not guard.reserve(0.3)  # 0.25 paid + 0.5 held + 0.3 > 1
    assert not guard.reserve(0.01)  # once stopped, nothing more goes out
    guard.settle(0.5, 0.1)
    assert (guard.spent, guard.held, guard.stopped) == (pytest.approx(0.35), 0.0, 2)
    assert "$0.6500 left" in str(guard.error()) and "2 call(s) not sent" in str(guard.error())
    with Store(tmp_path / "ws") as store, spending(store, "battles", 0.01):
        check_spend(0.004)
        with pytest.raises(SpendLimitReached, match="spend limit reached"):
            check_spend(0.007)
        settle_spend(0.004, 0.003)
    check_spend(100.0)  # no limit outside a stage


def test_batch_calls_are_priced_at_the_batch_price():
    openai = ModelSpec(name="x", engine="openai", base_url="http://127.0.0.1:1/v1", price_in=2.0, price_out=8.0)
    assert openai.batch_price == 0.5 and "price_batch" not in openai.model_dump()  # identities unchanged
    assert call_cost(openai, 1000, 500, batch=True) == pytest.approx(call_cost(openai, 1000, 500) / 2)
    custom = openai.model_copy(update={"price_batch": 0.6})
    assert call_cost(custom, 1000, 0, batch=True) == pytest.approx(0.0012)
    local = ModelSpec(name="y", engine="llamacpp", price_in=1.0)
    assert local.batch_price is None and call_cost(local, 1000, 0, batch=True) == pytest.approx(0.001)


def test_an_older_workspace_gains_the_spend_columns_and_counts_its_calls_unpriced(tmp_path):
    with Store(tmp_path / "ws"):
        pass
    db = sqlite3.connect(tmp_path / "ws" / "arena.db")
    for column in ("stage", "batch", "cost_usd"):
        db.execute(f"ALTER TABLE calls DROP COLUMN {column}")
    db.execute("INSERT INTO calls (key, engine, model, request, response, status, tokens_in, tokens_out, created_at, "
               "updated_at, requested_by) VALUES ('k', 'openai', 'm', '{}', '{}', 'ok', 10, 5, 0, 0, 'old')")
    db.execute("PRAGMA user_version=3")
    db.commit()
    db.close()
    with Store(tmp_path / "ws", readonly=True) as old:  # read as it is: no columns to sum yet
        assert old.spent_usd() == 0.0 and spend_summary(old.spend_rows())["unpriced"] == 1
    with Store(tmp_path / "ws") as store:
        assert store.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        store.record_calls([{"key": "k2", "engine": "openai", "model": "m", "request": {}, "response": {},
                             "status": "ok", "tokens_in": 4, "tokens_out": 2, "requested_by": "new",
                             "stage": "answers", "batch": True, "cost_usd": 0.5}])
        summary = spend_summary(store.spend_rows())
    assert summary["by_model"]["old"] == {"calls": 1, "batch_calls": 0, "tokens_in": 10, "tokens_out": 5, "usd": 0.0}
    assert summary["by_stage"]["answers"]["batch_calls"] == 1 and summary["usd"] == 0.5
    assert summary["unpriced"] == 1 and summary["by_stage"]["unknown"]["calls"] == 1


def test_plan_prices_the_endpoint_calls_synchronous_and_in_batches(tmp_path, servers):
    from arena_learning.config import RunConfig, load_config_file
    from arena_learning.plan import plan_run

    cfg = load_config_file(run_config(tmp_path, servers), RunConfig)
    with Store(tmp_path / "ws", readonly=True) as store:
        plan = plan_run(cfg, store)
    for line in plan.lines:
        assert line.cost > 0 and line.cost_batch == pytest.approx(line.cost / 2)
    totals = plan.totals()
    assert totals["cost_batch"] == pytest.approx(totals["cost"] / 2, rel=1e-5)
    local = cfg.model_copy(update={"models": [ModelSpec(name="l", engine="llamacpp", price_in=1.0), cfg.models[1]]})
    with Store(tmp_path / "ws", readonly=True) as store:
        answers = {x.model: x for x in plan_run(local, store).lines if x.step == "answer"}
    assert answers["l"].cost_batch is None and answers["b"].cost_batch == pytest.approx(answers["b"].cost / 2)
    shown = arena("plan", tmp_path / "run.yaml", "-w", tmp_path / "ws", cwd=REPO)
    assert shown.returncode == 0, shown.stderr
    assert "batch cost" in shown.stdout and f"${totals['cost_batch']:.4f} in batches" in shown.stdout


def test_a_flywheel_config_holds_its_arena_stages_to_its_spend_limit():
    from arena_learning.flywheel.settings import FlywheelConfig

    from .test_plan import FLYWHEEL

    plain = FlywheelConfig.model_validate(FLYWHEEL)
    assert plain.arena_config([plain.target, *plain.references]).spend_limit is None
    assert "spend_limit" not in plain.model_dump()  # saved configs and identities stay as they were
    limited = FlywheelConfig.model_validate({**FLYWHEEL, "spend_limit": {"usd": 5}})
    rc = limited.arena_config([limited.target, *limited.references])
    assert rc.spend_limit is not None and rc.spend_limit.usd == 5
