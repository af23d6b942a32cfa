"""`arena serve` as real clients use it: streamed answers (server-sent events) to the official `openai`
client and to raw HTTP, a 400 in OpenAI's error shape for what it cannot honour, and concurrent
requests decoded in one batch. The server is the real `arena serve` over the bundled model."""

from __future__ import annotations

import json
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import openai  # a core dependency: its absence fails, never skips
import pytest

pytestmark = pytest.mark.slow  # the server loads the bundled model

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def client(url: str):
    return openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=120)


def test_the_openai_client_streams_chat_with_a_final_usage_chunk(served_model):
    url, _ = served_model
    whole = client(url).chat.completions.create(model="gemma-2shot", messages=QUESTION)
    chunks = list(client(url).chat.completions.create(model="gemma-2shot", messages=QUESTION, stream=True,
                                                      stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content and text
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == whole.choices[0].finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens
    assert all(c.usage is None for c in chunks[:-1])


def test_the_openai_client_streams_completions_in_pieces(served_model):
    url, _ = served_model
    prompt = "Question: Name three colours.\nAnswer:"
    whole = client(url).completions.create(model="gemma-2shot", prompt=prompt, max_tokens=12, stop=[])
    chunks = list(client(url).completions.create(model="gemma-2shot", prompt=prompt, max_tokens=12, stop=[],
                                                 stream=True))
    assert "".join(c.choices[0].text for c in chunks) == whole.choices[0].text
    assert len([c for c in chunks if c.choices[0].text]) > 1  # token by token, not the whole at the end
    assert chunks[-1].choices[0].finish_reason == "length" == whole.choices[0].finish_reason


@pytest.mark.parametrize(("extra", "param"), [
    ({"n": 2}, "n"),
    ({"logprobs": True, "top_logprobs": 2}, "logprobs"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]}, "tools"),
])
def test_what_the_server_cannot_honour_is_a_400_in_openais_error_shape(served_model, extra, param):
    url, _ = served_model
    with pytest.raises(openai.BadRequestError) as err:
        client(url).chat.completions.create(model="gemma-2shot", messages=QUESTION, **extra)
    assert err.value.status_code == 400
    body = err.value.body
    assert isinstance(body, dict) and body["param"] == param and body["type"] == "invalid_request_error"
    assert "not supported" in body["message"]


def post(url: str, path: str, body: dict):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=120)


def test_a_raw_http_stream_is_server_sent_events_ending_in_done(served_model):
    url, _ = served_model
    with post(url, "/completions", {"prompt": "Question: What is 2 + 2?\nAnswer:", "stream": True,
                                    "stream_options": {"include_usage": True}}) as resp:
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        raw = resp.read().decode()
    events = [e for e in raw.split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events) and events[-1] == "data: [DONE]"
    data = [json.loads(e[len("data: "):]) for e in events[:-1]]
    assert {d["object"] for d in data} == {"text_completion"} and len({d["id"] for d in data}) == 1
    assert data[-1]["choices"] == [] and data[-1]["usage"]["completion_tokens"] >= 1
    assert data[-2]["choices"][0]["finish_reason"] in ("stop", "length")
    with pytest.raises(urllib.error.HTTPError) as err:
        post(url, "/completions", {"prompt": "hi", "stream": True, "n": 3})
    assert err.value.code == 400 and json.loads(err.value.read())["error"]["param"] == "n"


def test_concurrent_streams_are_decoded_in_one_batch(served_model):
    url, _ = served_model
    questions = [f"What is {i} + {i}?" for i in range(6)]

    def stream(q: str) -> tuple[str, str | None]:
        chunks = list(client(url).chat.completions.create(
            model="gemma-2shot", messages=[{"role": "user", "content": q}], stream=True, max_tokens=12))
        return "".join(c.choices[0].delta.content or "" for c in chunks), chunks[-1].choices[0].finish_reason

    with ThreadPoolExecutor(len(questions)) as pool:
        results = list(pool.map(stream, questions))
    assert all(reason in ("stop", "length") for _, reason in results)
    with urllib.request.urlopen(url.removesuffix("/v1") + "/health", timeout=30) as resp:
        health = json.loads(resp.read())
    assert health["batch"]["peak"] >= 2  # several sequences decoded in one step
