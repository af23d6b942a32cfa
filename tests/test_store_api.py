"""The store's named methods for what other modules used to do with SQL of their own (issue 19 item 4)."""

from __future__ import annotations

from pathlib import Path

import pytest

from arena_learning.errors import ArenaError
from arena_learning.records import Judgment
from arena_learning.store import Store

SRC = Path(__file__).resolve().parents[1] / "src" / "arena_learning"


def ledger_row(key: str, text: str) -> dict:
    return {"key": key, "engine": "e", "model": "m", "request": {"q": key}, "status": "ok",
            "response": {"text": text}, "tokens_in": 1, "tokens_out": 1}


def test_demoted_successes_become_failures_that_a_new_success_replaces(tmp_path):
    with Store(tmp_path / "ws") as store:
        store.record_calls([ledger_row("k1", ""), ledger_row("k2", "kept")])
        store.record_calls([ledger_row("k1", "never written")])  # a success is final...
        assert store.lookup_calls(["k1"])["k1"].response == {"text": ""}
        store.demote_calls([("empty completion", "k1")])  # ...until demoted
        rec = store.lookup_calls(["k1"])["k1"]
        assert (rec.status, rec.error) == ("error", "empty completion")
        assert store.lookup_calls(["k2"])["k2"].status == "ok"
        store.record_calls([ledger_row("k1", "the answer")])
        rec = store.lookup_calls(["k1"])["k1"]
        assert (rec.status, rec.response, rec.attempts) == ("ok", {"text": "the answer"}, 2)


def test_judgment_judges_lists_every_judge_with_judgments_in_any_set(tmp_path):
    def j(judge: str) -> Judgment:
        return Judgment(prompt_id="p", model_a="a", model_b="b", judge=judge, score_a=1, score_b=2, verdict="model_b")

    with Store(tmp_path / "ws") as store:
        assert store.judgment_judges() == []
        store.replace_judgments(["zeta", "alpha"], [j("zeta"), j("alpha")])
        store.replace_judgments(["beta"], [j("beta")], set_name="slice/D1")
        assert store.judgment_judges() == ["alpha", "beta", "zeta"]


def test_a_missing_workspace_is_an_error_for_readers_and_for_writers_that_must_not_create_it(tmp_path):
    missing = tmp_path / "nowhere"
    for kwargs in ({"readonly": True}, {"create": False}):
        with pytest.raises(ArenaError, match="is not a workspace \\(no arena.db\\)"):
            Store(missing, **kwargs)
    assert not missing.exists()  # nothing created, no lock file left
    assert not Store.exists(missing)
    with Store(missing):
        pass
    assert Store.exists(missing)
    with Store(missing, create=False) as store:
        store.set_meta("k", 1)
    with Store(missing, readonly=True) as store:
        assert store.get_meta("k") == 1


def test_no_module_but_the_store_runs_sql_or_looks_for_arena_db_itself():
    hits = [f"{p.relative_to(SRC)}:{i}" for p in sorted(SRC.rglob("*.py")) if p.name != "store.py"
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
            if ".execute(" in line or ".executemany(" in line or '"arena.db").is_file()' in line]
    assert hits == []
