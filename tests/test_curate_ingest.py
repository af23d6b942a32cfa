"""Ingest: every layout and container to the same records; bad inputs reported by file:line."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from arena_learning.cli.curate import register
from arena_learning.curate.ingest import IngestError, detect_layout, ingest, turns_hash
from arena_learning.curate.settings import SourceSpec
from arena_learning.store import Store

from .conftest import shared


def cli() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


ALPACA_ROWS = [
    {"instruction": "Give three tips for staying healthy.", "input": "", "output": "1. Eat well. 2. Sleep. 3. Move."},
    {
        "instruction": "Translate the sentence into French.",
        "input": "The cat sleeps on the mat.",
        "output": "Le chat dort sur le tapis.",
    },
    {"instruction": "Write a haiku about autumn rain.", "input": "", "output": ""},
]


# ---- layouts on real data ---------------------------------------------------------------


def test_sharegpt_sample_keeps_every_turn_and_the_assistant_turns_as_reference():
    report = ingest([shared("sharegpt_sample", "dummy_conversation.json")])
    raw = json.loads(shared("sharegpt_sample", "dummy_conversation.json").read_text())
    assert report.counts["ingested"] == 500 and not report.problems
    by_id = {p.id: p for p in report.prompts}
    for conv in raw:
        p = by_id[conv["id"]]
        assert p.turns == [m["value"] for m in conv["conversations"] if m["from"] == "human"]
        assert p.reference == [m["value"] for m in conv["conversations"] if m["from"] == "gpt"]
    assert sorted({len(p.turns) for p in report.prompts}) == [1, 2, 3]
    assert by_id["identity_0"].source == "sharegpt_sample/dummy_conversation"


def test_mtbench_questions_keep_both_turns_and_their_references():
    report = ingest([shared("mt_bench", "question.jsonl")])
    assert len(report.prompts) == 80 and all(len(p.turns) == 2 for p in report.prompts)
    q95 = next(p for p in report.prompts if p.id == "95")
    assert q95.category == "roleplay"
    assert q95.turns[1] == "Ich verstehe nur Bahnhof"
    assert q95.reference is not None and len(q95.reference) == 2


def test_arena_hard_rows_keep_uid_and_topic_label():
    report = ingest([shared("arena-hard-v0.1", "question.jsonl")])
    assert len(report.prompts) == 500
    first = report.prompts[0]
    assert first.id == "328c149ed45a41c0b9d6f14659e63599"
    assert first.turns == ["Use ABC notation to write a melody in the style of a folk tune."]
    assert first.meta["source_cluster"] == "ABC Sequence Puzzles & Groups"
    assert first.cluster is None  # ours is set by k-means, never copied from the source


def test_openai_messages_with_wrapped_answers_become_references():
    report = ingest([shared("arena-hard-v0.1", "model_answer", "gpt-4-0314.jsonl")])
    assert len(report.prompts) == 500 and not report.problems
    row = json.loads(shared("arena-hard-v0.1", "model_answer", "gpt-4-0314.jsonl").open().readline())
    p = report.prompts[0]
    assert p.id == row["uid"]
    assert p.reference == [row["messages"][1]["content"]["answer"]]
    assert p.meta["model"] == "gpt-4-0314"


def test_openai_system_message_goes_to_meta_and_unanswered_last_turn_leaves_no_reference(tmp_path):
    rows = [
        {
            "id": "c1",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Name a prime."},
                {"role": "assistant", "content": "7"},
                {"role": "user", "content": [{"type": "text", "text": "Another?"}]},
            ],
        }
    ]
    p = ingest([write_jsonl(tmp_path / "chat.jsonl", rows)]).prompts[0]
    assert p.turns == ["Name a prime.", "Another?"]
    assert p.meta["system"] == "Be brief."
    assert p.reference is None and p.meta["partial_reference"] == ["7"]


# ---- containers: the same rows in every file type give the same records ------------------


def _rows_for_containers() -> dict[str, list[dict]]:
    sharegpt = json.loads(shared("sharegpt_sample", "dummy_conversation.json").read_text())[:40]
    mtbench = [json.loads(line) for line in shared("mt_bench", "question.jsonl").open()]
    return {"sharegpt": sharegpt, "mtbench": mtbench, "alpaca": ALPACA_ROWS}


def _write_every_container(folder: Path, stem: str, rows: list[dict]) -> list[Path]:
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    keys = list(dict.fromkeys(k for r in rows for k in r))
    paths = [folder / f"{stem}.json", folder / f"{stem}.jsonl", folder / f"{stem}.parquet", folder / f"{stem}.csv"]
    paths[0].write_text(json.dumps(rows, indent=2, ensure_ascii=False), encoding="utf-8")
    write_jsonl(paths[1], rows)
    # by columns: from_pylist would take the schema of the first row alone
    pq.write_table(pa.table({k: [r.get(k) for r in rows] for k in keys}), paths[2])
    with open(paths[3], "w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=keys)
        writer.writeheader()
        for r in rows:
            writer.writerow({k: json.dumps(v) if isinstance(v, list) else r.get(k, "") for k, v in r.items()})
    hf = folder / f"{stem}_hf"
    datasets.Dataset.from_dict({k: [r.get(k) for r in rows] for k in keys}).save_to_disk(str(hf))
    return [*paths, hf]


@pytest.mark.parametrize("layout", ["sharegpt", "mtbench", "alpaca"])
def test_json_jsonl_parquet_csv_and_dataset_folder_ingest_to_the_same_records(tmp_path, layout):
    rows = _rows_for_containers()[layout]
    paths = _write_every_container(tmp_path / layout, layout, rows)
    results = {}
    for path in paths:
        report = ingest([SourceSpec(path=str(path), name=layout)])
        assert not report.problems, (path, report.problems[:3])
        results[path.name] = [p.model_dump() for p in report.prompts]
    reference = results[f"{layout}.jsonl"]
    assert len(reference) == len(rows)
    for name, records in results.items():
        assert records == reference, name
    if layout == "alpaca":
        second = reference[1]
        assert second["turns"] == ["Translate the sentence into French.\n\nThe cat sleeps on the mat."]
        assert second["reference"] == ["Le chat dort sur le tapis."]
        assert reference[2]["reference"] is None  # an empty output is no reference answer


def test_dataset_dict_folder_reads_every_split(tmp_path):
    import datasets

    rows = _rows_for_containers()["mtbench"]
    dd = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict({"question_id": [r["question_id"] for r in rows[:50]],
                                                 "turns": [r["turns"] for r in rows[:50]]}),
            "test": datasets.Dataset.from_dict({"question_id": [r["question_id"] for r in rows[50:]],
                                                "turns": [r["turns"] for r in rows[50:]]}),
        }
    )
    dd.save_to_disk(str(tmp_path / "mt"))
    report = ingest([tmp_path / "mt"])
    assert len(report.prompts) == 80


# ---- detection and forcing ---------------------------------------------------------------


def test_layout_is_detected_from_keys():
    assert detect_layout({"conversations": []}) == "sharegpt"
    assert detect_layout({"messages": []}) == "openai"
    assert detect_layout({"instruction": "x"}) == "alpaca"
    assert detect_layout({"turns": ["x"]}) == "mtbench"
    assert detect_layout({"uid": "1", "prompt": "x"}) == "arenahard"
    assert detect_layout({"text": "x"}) is None


def test_forced_format_reads_rows_that_detection_would_not_know(tmp_path):
    path = write_jsonl(tmp_path / "odd.jsonl", [{"instruction": "Say hi.", "extra": 1}])
    assert ingest([SourceSpec(path=str(path), format="alpaca")]).prompts[0].turns == ["Say hi."]
    wrong = ingest([SourceSpec(path=str(shared("mt_bench", "question.jsonl")), format="sharegpt")])
    assert wrong.counts["bad_record"] == 80 and not wrong.prompts
    assert "'conversations' must be a list" in wrong.problems[0].reason


def test_prompt_without_own_id_gets_a_stable_hash_of_its_turns(tmp_path):
    a = ingest([write_jsonl(tmp_path / "a.jsonl", ALPACA_ROWS)]).prompts
    b = ingest([write_jsonl(tmp_path / "b.jsonl", list(reversed(ALPACA_ROWS)))]).prompts
    assert {p.id for p in a} == {p.id for p in b}
    assert a[0].id == turns_hash(["Give three tips for staying healthy."])


def test_same_id_with_other_content_is_renamed_not_lost(tmp_path):
    one = write_jsonl(tmp_path / "one.jsonl", [{"question_id": 1, "turns": ["What is 2+2?"]}])
    two = write_jsonl(tmp_path / "two.jsonl", [{"question_id": 1, "turns": ["Name a colour."]}])
    report = ingest([one, two, one])
    assert report.prompts[0].id == "1"
    assert report.prompts[1].id.startswith("1#") and report.prompts[1].turns == ["Name a colour."]
    assert report.counts["id_renamed"] == 1 and report.counts["already_present"] == 1


# ---- bad inputs ----------------------------------------------------------------------------


def test_truncated_json_keeps_the_records_before_and_names_the_line(tmp_path):
    text = shared("sharegpt_sample", "dummy_conversation.json").read_text()
    cut = text.index('"id": "identity_10"')  # inside the 11th record
    path = tmp_path / "truncated.json"
    path.write_text(text[:cut + 30], encoding="utf-8")
    report = ingest([path])
    assert [p.id for p in report.prompts] == [f"identity_{i}" for i in range(10)]
    assert report.counts["bad_json"] == 1
    problem = report.problems[0]
    start_line = text[:cut].count("\n") + 1
    line = int(problem.where.rsplit(":", 1)[1])
    assert problem.where.startswith(f"{path}:") and line >= start_line
    assert "truncated" in problem.reason or "invalid JSON" in problem.reason


def test_a_line_of_the_wrong_format_is_skipped_with_its_line_number(tmp_path):
    rows = [json.loads(line) for line in shared("arena-hard-v0.1", "question.jsonl").open()][:5]
    lines = [json.dumps(r) for r in rows]
    lines.insert(2, json.dumps(ALPACA_ROWS[0]))  # line 3: another layout
    lines.insert(4, "[1, 2, 3]")  # line 5: not an object
    lines.insert(5, '{"uid": "x", "prompt": ')  # line 6: broken JSON
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    report = ingest([path])
    assert len(report.prompts) == 5
    found = {p.where: p.kind for p in report.problems}
    assert found == {f"{path}:3": "wrong_format", f"{path}:5": "wrong_format", f"{path}:6": "bad_json"}
    assert "not a arenahard record" in str(report.problems[0])


def test_non_utf8_bytes_are_reported_per_line_in_jsonl_json_and_csv(tmp_path):
    good = json.dumps({"question_id": 1, "turns": ["Hello there, how are you?"]}).encode()
    bad = b'{"question_id": 2, "turns": ["caf\xe9 au lait"]}'
    jsonl = tmp_path / "latin1.jsonl"
    jsonl.write_bytes(good + b"\n" + bad + b"\n" + good.replace(b"1", b"3") + b"\n")
    report = ingest([jsonl])
    assert [p.id for p in report.prompts] == ["1", "3"]
    assert report.problems[0].where == f"{jsonl}:2" and report.problems[0].kind == "not_utf8"
    assert "0xe9" in report.problems[0].reason

    array = tmp_path / "latin1.json"
    array.write_bytes(b"[\n" + good + b",\n" + bad + b"\n]\n")
    report = ingest([array])
    assert [p.id for p in report.prompts] == ["1"]
    assert report.problems[0].where == f"{array}:3" and report.problems[0].kind == "not_utf8"

    table = tmp_path / "latin1.csv"
    table.write_bytes(b"instruction,input,output\nSay hi.,,hi\nCaf\xe9?,,oui\n")
    report = ingest([table])
    assert len(report.prompts) == 1 and report.problems[0].where == f"{table}:3"


def test_an_empty_file_is_counted_and_fatal_only_when_strict(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    report = ingest([empty])
    assert report.counts["empty_file"] == 1 and str(report.problems[0]) == f"{empty}:1: the file is empty"
    with pytest.raises(IngestError, match="empty.jsonl:1: the file is empty"):
        ingest([empty], strict=True)


def test_bad_record_inside_a_good_layout_names_the_field(tmp_path):
    path = write_jsonl(
        tmp_path / "robot.jsonl",
        [{"id": "r1", "conversations": [{"from": "human", "value": "Hi"}, {"from": "robot", "value": "Beep"}]}],
    )
    report = ingest([path])
    assert report.problems[0].kind == "bad_record"
    assert "conversations[1].from is 'robot'" in report.problems[0].reason


# ---- the CLI -----------------------------------------------------------------------------


def test_cli_ingest_is_idempotent_and_writes_a_jsonl_copy(tmp_path):
    ws = tmp_path / "ws"
    args = ["ingest", str(shared("mt_bench", "question.jsonl")), str(shared("vicuna_bench", "question.jsonl")),
            "--out", str(ws), "-q"]
    first = CliRunner().invoke(cli(), args)
    assert first.exit_code == 0, first.output
    with Store(ws) as store:
        ids = [p.id for p in store.get_prompts("ingested")]
    second = CliRunner().invoke(cli(), args)
    assert second.exit_code == 0, second.output
    with Store(ws) as store:
        assert [p.id for p in store.get_prompts("ingested")] == ids
    assert len(ids) == 160
    assert "already" in second.output  # the table shows the 160 already present
    lines = (ws / "sets" / "ingested.jsonl").read_text().splitlines()
    assert len(lines) == 160 and json.loads(lines[0])["id"] == ids[0]


def test_cli_strict_stops_at_the_bad_line_and_keeps_what_was_ingested(tmp_path):
    ws = tmp_path / "ws"
    rows = [{"question_id": i, "turns": [f"Question number {i}?"]} for i in range(1, 6)]
    path = tmp_path / "broken.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows[:3]) + "\n{oops\n" + json.dumps(rows[3]) + "\n")
    result = CliRunner().invoke(
        cli(), ["ingest", str(shared("vicuna_bench", "question.jsonl")), str(path), "--out", str(ws), "--strict", "-q"]
    )
    assert result.exit_code == 2
    assert f"{path}:4" in result.output and "--strict" in result.output
    with Store(ws) as store:
        kept = store.get_prompts("ingested")
    # all of the first file, and the three lines of the second before the bad one
    assert len(kept) == 83


def test_cli_rejects_an_unknown_format(tmp_path):
    result = CliRunner().invoke(cli(), ["ingest", str(tmp_path), "--out", str(tmp_path / "ws"), "--format", "xml"])
    assert result.exit_code == 2 and "--format 'xml'" in result.output


def test_tsv_is_read_tab_separated(tmp_path):
    path = tmp_path / "alpaca.tsv"
    with open(path, "w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=["instruction", "input", "output"], delimiter="\t")
        writer.writeheader()
        writer.writerows(ALPACA_ROWS)
    report = ingest([SourceSpec(path=str(path), name="alpaca")])
    assert not report.problems
    assert report.prompts == ingest([SourceSpec(path=str(write_jsonl(tmp_path / "a.jsonl", ALPACA_ROWS)),
                                                name="alpaca")]).prompts


def test_a_folder_with_state_json_that_is_no_dataset_is_an_ingest_error(tmp_path):
    folder = tmp_path / "not_a_dataset"
    folder.mkdir()
    (folder / "state.json").write_text("{}", encoding="utf-8")
    with pytest.raises(IngestError, match="not_a_dataset.*save_to_disk"):
        ingest([folder])


def test_records_of_a_json_object_are_reported_at_their_own_line(tmp_path):
    rows = [json.loads(line) for line in shared("arena-hard-v0.1", "question.jsonl").open()][:3]
    rows.insert(1, {"uid": "bad", "prompt": 7})  # a prompt that is not text
    text = json.dumps({"version": "1", "data": rows}, indent=2)
    path = tmp_path / "wrapped.json"
    path.write_text(text, encoding="utf-8")
    report = ingest([path])
    assert [p.id for p in report.prompts] == [rows[0]["uid"], rows[2]["uid"], rows[3]["uid"]]
    bad_line = text[: text.index('"uid": "bad"')].count("\n")  # the line of the record's '{'
    assert [(p.where, p.kind) for p in report.problems] == [(f"{path}:{bad_line}", "bad_record")]


def test_a_prompt_sets_own_jsonl_copy_is_read_back_whole(tmp_path):
    """`sets/<name>.jsonl` (what `arena testset build` writes) ingested again keeps every field, so a run reading its
    test set from the file can still be broken down by cluster and subset."""
    from arena_learning.curate.ingest import ingest
    from arena_learning.curate.runs import save_set, set_path
    from arena_learning.curate.settings import SourceSpec
    from arena_learning.records import Prompt
    from arena_learning.store import Store

    prompts = [Prompt(id="p1", turns=["Write a poem.", "Shorter."], source="arena-hard", category="writing",
                      cluster="c3", difficulty=7.5, reference=None, meta={"subset": "hard", "source_cluster": "poems"}),
               Prompt(id="p2", turns=["What is 2+2?"], source="mt_bench", cluster="c1", difficulty=2.0,
                      meta={"subset": "diverse"})]
    with Store(tmp_path / "ws") as store:
        save_set(store, "testset/mix", prompts)
        path = set_path(store, "testset/mix")
    got = ingest([SourceSpec(path=str(path))]).prompts
    assert [p.model_dump() for p in got] == [p.model_dump() for p in prompts]
    # An MT-Bench question is still read as one (its own fields only).
    q = tmp_path / "q.jsonl"
    q.write_text('{"question_id": 81, "category": "writing", "turns": ["Compose a blog post.", "Rewrite it."]}\n')
    (mt,) = ingest([SourceSpec(path=str(q))]).prompts
    assert mt.id == "81" and mt.category == "writing" and mt.cluster is None and mt.meta == {}
