"""The local Files and Batches double (tests/batch_server.py) held to what the official ``openai`` client expects:
uploads, jobs through their statuses, output and error files, listing by cursor, cancel, expiry, validation."""

from __future__ import annotations

import json
import time

import pytest

from .conftest import Reply, http_error


def upper(body):
    return Reply(body["messages"][-1]["content"].upper())


def line(i, content=None, url="/v1/chat/completions"):
    return json.dumps({"custom_id": f"req-{i}", "method": "POST", "url": url,
                       "body": {"model": "m", "messages": [{"role": "user", "content": content or f"q{i}"}]}})


def wait(client, batch_id, until=("completed", "failed", "expired", "cancelled"), timeout=10.0):
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        batch = client.batches.retrieve(batch_id)
        if not seen or seen[-1] != batch.status:
            seen.append(batch.status)
        if batch.status in until:
            return batch, seen
        time.sleep(0.02)
    raise AssertionError(f"batch {batch_id} stayed {seen}")


def client_of(url):
    from openai import OpenAI

    return OpenAI(base_url=url, api_key="none", max_retries=0)


def test_a_job_runs_its_lines_upstream_and_the_client_reads_output_and_error_files(batch_server):
    server, url, upstream = batch_server(lambda body: http_error(400, "no") if "bad" in str(body) else upper(body),
                                         step_s=0.05)
    client = client_of(url)
    data = "\n".join([line(1), line(2, "bad one"), line(3)]) + "\n"
    uploaded = client.files.create(file=("in.jsonl", data.encode()), purpose="batch")
    assert uploaded.purpose == "batch" and uploaded.bytes == len(data.encode())
    assert client.files.content(uploaded.id).text == data
    created = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                    completion_window="24h", metadata={"arena_batch": "k1"})
    assert created.status == "validating" and created.metadata == {"arena_batch": "k1"}
    batch, seen = wait(client, created.id)
    assert seen[0] == "validating" and seen[-1] == "completed" and "finalizing" in seen
    assert batch.request_counts.total == 3 and batch.request_counts.completed == 2 and batch.request_counts.failed == 1
    assert batch.completed_at and batch.in_progress_at and batch.finalizing_at
    out = [json.loads(x) for x in client.files.content(batch.output_file_id).text.splitlines()]
    assert {o["custom_id"]: o["response"]["body"]["choices"][0]["message"]["content"] for o in out} == {
        "req-1": "Q1", "req-3": "Q3"}
    assert all(o["response"]["status_code"] == 200 and o["error"] is None for o in out)
    err = [json.loads(x) for x in client.files.content(batch.error_file_id).text.splitlines()]
    assert [(e["custom_id"], e["response"]["status_code"]) for e in err] == [("req-2", 400)]
    assert server.counts() == {"created": 1, "requests": 3, "duplicates": 0, "files": 3}
    assert upstream.requests == 3


def test_listing_pages_newest_first_and_finds_a_job_by_its_metadata(batch_server):
    server, url, _ = batch_server(upper)
    client = client_of(url)
    fid = client.files.create(file=("in.jsonl", (line(1) + "\n").encode()), purpose="batch").id
    ids = [client.batches.create(input_file_id=fid, endpoint="/v1/chat/completions", completion_window="24h",
                                 metadata={"arena_batch": f"k{i}"}).id for i in range(5)]
    page = client.batches.list(limit=2)
    assert [b.id for b in page.data] == ids[::-1][:2] and page.has_more
    every = [b.id for b in client.batches.list(limit=2)]  # the client follows the cursor (after=last id)
    assert every == ids[::-1]
    assert next(b.id for b in client.batches.list(limit=100) if b.metadata["arena_batch"] == "k2") == ids[2]
    assert server.created == 5


def test_an_input_that_does_not_validate_fails_the_job_with_line_errors(batch_server):
    from openai import BadRequestError, NotFoundError

    server, url, upstream = batch_server(upper)
    client = client_of(url)
    bad = "\n".join([line(1), "not json", line(1), line(4, url="/v1/completions")]) + "\n"
    fid = client.files.create(file=("in.jsonl", bad.encode()), purpose="batch").id
    batch, _ = wait(client, client.batches.create(input_file_id=fid, endpoint="/v1/chat/completions",
                                                  completion_window="24h").id)
    assert batch.status == "failed" and batch.failed_at
    assert [(e.code, e.line) for e in batch.errors.data] == [
        ("invalid_json_line", 2), ("duplicate_custom_id", 3), ("mismatched_endpoint", 4)]
    assert upstream.requests == 0 and batch.output_file_id is None
    with pytest.raises(BadRequestError, match="completion_window"):
        client.batches.create(input_file_id=fid, endpoint="/v1/chat/completions", completion_window="1h")
    with pytest.raises(NotFoundError):
        client.batches.retrieve("batch_nope")
    with pytest.raises(NotFoundError):
        client.files.content("file-nope")


def test_an_expired_job_keeps_what_completed_and_a_cancelled_one_stops(batch_server):
    server, url, _ = batch_server(upper, concurrency=1, expire_after=2)
    client = client_of(url)
    fid = client.files.create(file=("in.jsonl", "".join(line(i) + "\n" for i in range(5)).encode()),
                              purpose="batch").id
    batch, _ = wait(client, client.batches.create(input_file_id=fid, endpoint="/v1/chat/completions",
                                                  completion_window="24h").id)
    assert batch.status == "expired" and batch.expired_at and batch.request_counts.completed == 2
    out = client.files.content(batch.output_file_id).text.splitlines()
    err = [json.loads(x) for x in client.files.content(batch.error_file_id).text.splitlines()]
    assert len(out) == 2 and [e["error"]["code"] for e in err] == ["batch_expired"] * 3

    server.expire_after = None
    server.hold()
    created = client.batches.create(input_file_id=fid, endpoint="/v1/chat/completions", completion_window="24h")
    wait(client, created.id, until=("in_progress",))
    assert client.batches.cancel(created.id).status == "cancelling"
    server.release()
    batch, _ = wait(client, created.id)
    assert batch.status == "cancelled" and batch.cancelled_at and batch.output_file_id is None
    err = [json.loads(x) for x in client.files.content(batch.error_file_id).text.splitlines()]
    assert [e["error"]["code"] for e in err] == ["batch_cancelled"] * 5
    assert server.counts()["requests"] == 2  # the expired job's two lines; the cancelled job sent none
