"""The official OpenAI Python client against `pdrouter dev --sim`.

dev is started as a user's script would start it:

    pdrouter dev --sim --sim-max-requests 1 --kafka-port 0 --http-addr 127.0.0.1:0

and, after the workload's report, while the idle simulated fleet keeps
serving, the client is pointed at the router's front door
(http://<http-addr>/v1) with the model GET /v1/models names: completions
and chat completions, streamed and whole, with a text prompt and with token
ids; the decision id header; the error shapes the client raises; and each
request's outcome on the outcomes topic, joined to its decision by
`pdrouter export decisions --join-outcomes`. The simulated engines' own
OpenAI API and NixlConnector's kv_transfer_params exchange are tested
directly too. The binary is the `pdrouter_bin` fixture (PDR_BIN in make
test).
"""
import json
import queue
import re
import shutil
import subprocess
import threading
import time
import urllib.request

import openai
import pytest

# The report's last line: the outcomes of the workload are checked.
OUTCOMES_LINE = re.compile(r"outcomes\s+(\d+) of (\d+) requests have their outcome joined to their decision \((\d+) missing\)")


class Dev:
    """A running `pdrouter dev --sim`, with what it printed."""

    def __init__(self, binary, data, extra=()):
        self.binary = binary
        self.proc = subprocess.Popen(
            [binary, "dev", "--sim", "--sim-max-requests", "1", "--kafka-port", "0", "--http-addr", "127.0.0.1:0",
             "--data-dir", str(data), *extra],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.lines = queue.Queue()
        threading.Thread(target=lambda: [self.lines.put(l) for l in self.proc.stdout], daemon=True).start()
        self.out, self.engines, self.api, self.kafka = [], {}, None, None

    def wait_report(self, timeout=180):
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError("no report from pdrouter dev:\n" + "".join(self.out))
            self.out.append(line)
            if m := re.match(r"\s+api\s+(http://\S+)", line):
                self.api = m.group(1)
            if m := re.match(r"\s+kafka\s+(\S+)", line):
                self.kafka = m.group(1)
            if m := re.match(r"\s+sim engine (\S+)\s+OpenAI API (\S+)", line):
                self.engines[m.group(1)] = m.group(2)
            if OUTCOMES_LINE.match(line):
                return "".join(self.out)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def dev(tmp_path_factory, pdrouter_bin):
    d = Dev(pdrouter_bin, tmp_path_factory.mktemp("devsim"))
    try:
        d.report = d.wait_report()
        yield d
    finally:
        d.stop()


def client(url):
    return openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def door(dev):
    c = client(dev.api + "/v1")
    models = c.models.list().data
    assert len(models) == 1, models
    return c, models[0].id


def test_report_through_the_door(dev):
    """The workload went through the door: its placement is counted and every outcome joined."""
    assert "== live via " + dev.api + "/v1 ==" in dev.report, dev.report
    m = re.search(r"placement\s+local (\d+) \([^)]*\), remote (\d+)", dev.report)
    assert m and int(m.group(1)) + int(m.group(2)) == 1, dev.report
    assert "not visible to the client" not in dev.report
    assert OUTCOMES_LINE.search(dev.report).groups() == ("1", "1", "0"), dev.report


def test_sim_http_refusals_exported(dev):
    """dev's /metrics has the engines' refusal series (entry sim_http), at 0 from the start."""
    body = urllib.request.urlopen(dev.api + "/metrics", timeout=30).read().decode()
    assert re.search(r'pdrouter_rejected_total\{entry="sim_http",reason="[a-z_]+"\} 0', body), \
        [l for l in body.splitlines() if "rejected_total" in l]


def exported(dev):
    """The decisions of the dev broker with their outcomes joined, by decision id."""
    out = subprocess.run([dev.binary, "export", "decisions", "--brokers", dev.kafka, "--join-outcomes",
                          "--format", "jsonl", "--out", "-"], capture_output=True, text=True, timeout=120, check=True)
    return {r["decision_id"]: r for r in map(json.loads, out.stdout.splitlines())}


def wait_outcomes(dev, ids, timeout=30):
    """Waits until each decision's row in the export has a completed outcome
    (the door appends it once the client has its answer), and returns the rows."""
    deadline = time.monotonic() + timeout
    while True:
        rows = exported(dev)
        if all(rows.get(i, {}).get("outcome") == "completed" for i in ids) or time.monotonic() > deadline:
            return rows
        time.sleep(0.25)


def test_openai_client_through_the_door(dev, door):
    c, model = door
    ids = {}

    # chat, whole, read raw for the decision id header
    raw = c.chat.completions.with_raw_response.create(model=model, messages=[{"role": "user", "content": "Hello"}],
                                                      max_tokens=5)
    ids["chat"] = raw.headers["x-pdrouter-decision-id"]
    assert raw.headers["x-pdrouter-mode"] in ("local", "remote") and raw.headers["x-pdrouter-reason"]
    chat = raw.parse()
    assert chat.choices[0].message.role == "assistant" and len(chat.choices[0].message.content.split()) == 5
    assert chat.usage.completion_tokens == 5 and chat.usage.prompt_tokens > 0

    # chat, streamed with usage
    with c.chat.completions.with_streaming_response.create(
            model=model, messages=[{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi"},
                                   {"role": "user", "content": "Tell me more"}],
            max_tokens=6, stream=True, stream_options={"include_usage": True}) as resp:
        ids["chat_stream"] = resp.headers["x-pdrouter-decision-id"]
        parts, usage = [], None
        for ch in resp.parse():
            if ch.choices:
                parts.append(ch.choices[0].delta.content or "")
            else:
                usage = ch.usage
    assert usage is not None and usage.completion_tokens == 6 and len("".join(parts).split()) == 6

    # completions, text prompt, whole
    raw = c.completions.with_raw_response.create(model=model, prompt="The quick brown fox", max_tokens=4)
    ids["text"] = raw.headers["x-pdrouter-decision-id"]
    r = raw.parse()
    assert r.usage.completion_tokens == 4 and len(r.choices[0].text.split()) == 4 and r.choices[0].finish_reason == "length"

    # completions, token ids, streamed (a long prompt: the decider may send it to a prefill worker)
    prompt = list(range(1000, 4000))
    with c.completions.with_streaming_response.create(model=model, prompt=prompt, max_tokens=7, stream=True) as resp:
        ids["ids_stream"] = resp.headers["x-pdrouter-decision-id"]
        text = "".join(ch.choices[0].text for ch in resp.parse() if ch.choices)
    assert len(text.split()) == 7

    # completions, token ids, whole, and text, streamed, without reading headers
    r = c.completions.create(model=model, prompt=list(range(5, 40)), max_tokens=3)
    assert r.usage.completion_tokens == 3 and r.usage.prompt_tokens == 35
    text = "".join(ch.choices[0].text for ch in c.completions.create(model=model, prompt="Once upon a time", max_tokens=3,
                                                                        stream=True))
    assert len(text.split()) == 3

    assert len(set(ids.values())) == len(ids), ids
    rows = wait_outcomes(dev, ids.values())
    want_tokens = {"chat": 5, "chat_stream": 6, "text": 4, "ids_stream": 7}
    for name, i in ids.items():
        row = rows.get(i)
        assert row is not None, f"{name}: decision {i} is not in the export"
        assert row["outcome"] == "completed", (name, row["outcome"], row["outcome_events"])
        assert row["output_tokens"] == want_tokens[name] and row["ttft_ms"] is not None and row["ttft_ms"] > 0, (name, row)
        assert row["model"] == model and row["mode"] in ("local", "remote")
        if row["mode"] == "remote":
            assert row["prefill_done_at"] is not None, (name, row)


def error_of(exc):
    body = exc.value.body
    return body.get("code"), body.get("type"), body.get("param")


def test_errors_through_the_door(dev, door):
    c, model = door
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model=model, prompt="hi", max_tokens=0)
    assert e.value.status_code == 400 and error_of(e) == ("invalid_value", "invalid_request_error", "max_tokens")
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model=model, messages=[], max_tokens=3)
    assert error_of(e) == ("invalid_value", "invalid_request_error", "messages")
    with pytest.raises(openai.NotFoundError) as e:
        c.completions.create(model="no-such-model", prompt="hi", max_tokens=3)
    assert e.value.status_code == 404 and error_of(e) == ("model_not_found", "invalid_request_error", "model")
    assert "no-such-model" in e.value.message


@pytest.fixture(scope="module")
def narrow_dev(tmp_path_factory, pdrouter_bin):
    """A dev whose door serves one request at a time."""
    d = Dev(pdrouter_bin, tmp_path_factory.mktemp("devsim-narrow"), ["--door-max-in-flight", "1"])
    try:
        d.wait_report()
        yield d
    finally:
        d.stop()


def test_rate_limit_through_the_door(narrow_dev):
    c = client(narrow_dev.api + "/v1")
    model = c.models.list().data[0].id
    # One long stream holds the door's only slot while a second request comes.
    stream = c.completions.create(model=model, prompt="a long story", max_tokens=2000, stream=True)
    try:
        next(iter(stream))
        with pytest.raises(openai.RateLimitError) as e:
            c.completions.create(model=model, prompt="hi", max_tokens=2)
        assert e.value.status_code == 429 and e.value.response.headers["retry-after"] == "1"
        assert error_of(e) == ("too_many_requests", "rate_limit_error", None)
    finally:
        stream.close()


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not on PATH")
def test_curl_streamed_completion(dev, door):
    _, model = door
    body = json.dumps({"model": model, "prompt": "Hello from curl", "max_tokens": 3, "stream": True})
    out = subprocess.run(["curl", "-sS", "-N", "-D", "-", "-H", "Content-Type: application/json", "-d", body,
                          dev.api + "/v1/completions"], capture_output=True, text=True, timeout=60, check=True).stdout
    head, _, stream = out.partition("\n\n")  # text mode reads CRLF as LF
    assert head.startswith("HTTP/1.1 200") and "text/event-stream" in head, head
    decision = re.search(r"(?im)^x-pdrouter-decision-id: (\S+)", head).group(1)
    events = [l[len("data: "):] for l in stream.splitlines() if l.startswith("data: ")]
    assert events[-1] == "[DONE]" and len(events) == 4, events
    assert all(json.loads(e)["object"] == "text_completion" for e in events[:-1])
    assert wait_outcomes(dev, [decision])[decision]["output_tokens"] == 3


def test_engine_completions_and_chat(dev):
    """Each simulated engine serves OpenAI's API itself."""
    c = client(dev.engines["decode-0"])
    model = c.models.list().data[0].id
    r = c.completions.create(model=model, prompt="The quick brown fox", max_tokens=5)
    assert r.usage.completion_tokens == 5 and len(r.choices[0].text.split()) == 5
    parts, usage = [], None
    for ch in c.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=4,
                                        stream=True, stream_options={"include_usage": True}):
        if ch.choices:
            parts.append(ch.choices[0].delta.content or "")
        else:
            usage = ch.usage
    assert usage is not None and usage.completion_tokens == 4
    assert len("".join(parts).split()) == 4


def test_engine_pd_handshake(dev):
    """NixlConnector's exchange between a prefill and a decode engine, as vLLM's proxy drives it."""
    pre, dec = client(dev.engines["prefill-0"]), client(dev.engines["decode-1"])
    model = pre.models.list().data[0].id
    prompt = list(range(100, 300))
    p = pre.completions.create(model=model, prompt=prompt, max_tokens=1, extra_headers={"X-Request-Id": "py-pd-1"},
                               extra_body={"kv_transfer_params": {"do_remote_decode": True, "do_remote_prefill": False,
                                                                  "remote_engine_id": None, "remote_block_ids": None,
                                                                  "remote_host": None, "remote_port": None}})
    kv = p.model_dump()["kv_transfer_params"]
    assert kv["do_remote_prefill"] is True and kv["remote_engine_id"] == "prefill-0"
    assert kv["remote_request_id"] == "py-pd-1" and len(kv["remote_block_ids"]) == 13
    text = ""
    for ch in dec.completions.create(model=model, prompt=prompt, max_tokens=6, stream=True,
                                     extra_body={"kv_transfer_params": kv}):
        text += ch.choices[0].text
    assert text.startswith(p.choices[0].text) and len(text.split()) == 6
