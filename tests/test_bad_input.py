"""Bad input: each a clear message (what, where, what to do), exit code 2, and nothing half-written."""

from __future__ import annotations

from arena_learning.records import Answer
from arena_learning.store import Store

from .conftest import arena  # in this process: the message and the exit code are the CLI's, not the interpreter's


def test_an_answer_file_with_no_good_record_imports_nothing_and_creates_nothing(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'\xff\xfe not text\n{"oops": \n["a list"]\n')
    proc = arena("import-answers", bad, "-w", tmp_path / "ws")
    assert proc.returncode == 2 and "no answers in" in proc.stderr and "bad.jsonl:1" in proc.stderr
    assert "3 records skipped" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "ws").exists()


def test_forgetting_an_unknown_model_names_the_models_there(tmp_path):
    with Store(tmp_path / "ws") as s:
        s.put_answers([Answer(prompt_id="p", model="alpha", turns=["x"])])
    proc = arena("forget", tmp_path / "ws", "-m", "alpah")
    assert proc.returncode == 2 and "'alpah'" in proc.stderr and "alpha" in proc.stderr
    with Store(tmp_path / "ws", readonly=True) as s:
        assert len(s.get_answers()) == 1  # nothing was forgotten


def test_a_strict_ingest_stops_at_the_bad_line_and_keeps_what_came_before(tmp_path):
    src = tmp_path / "conv.jsonl"
    src.write_bytes(b'{"instruction": "Say hi", "output": "hi"}\n{"instruction": "Count", "output": "1 2"}\n'
                    b'{broken\n{"instruction": "never read", "output": "x"}\n')
    proc = arena("ingest", src, "--out", tmp_path / "ws", "--strict", "-q")
    assert proc.returncode == 2 and "conv.jsonl:3" in proc.stderr and "--strict" in proc.stderr
    with Store(tmp_path / "ws", readonly=True) as s:
        assert [p.turns for p in s.get_prompts("ingested")] == [["Say hi"], ["Count"]]


def test_a_config_naming_an_unknown_model_to_serve_lists_the_models(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("name: t\nmodels:\n  - {name: a, engine: imported}\n  - {name: b, engine: imported}\n")
    proc = arena("serve", "-c", cfg, "-m", "nope")
    assert proc.returncode == 2 and "no model named 'nope'" in proc.stderr and "a, b" in proc.stderr
