"""The simulated engines of `pdrouter dev --sim` speak OpenAI HTTP to the official
OpenAI Python client: completions and chat, streamed with usage, after the workload's
report (the idle fleet keeps serving), and NixlConnector's kv_transfer_params
exchange between a prefill and a decode engine.

The binary is PDR_BIN when set, otherwise built from this checkout.
"""
import os
import pathlib
import queue
import re
import subprocess
import threading

import openai
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dev_fleet(tmp_path_factory):
    binary = os.environ.get("PDR_BIN")
    if not binary:
        binary = str(tmp_path_factory.mktemp("bin") / "pdrouter")
        subprocess.run(["go", "build", "-o", binary, "./cmd/pdrouter"], cwd=ROOT, check=True, timeout=600)
    data = tmp_path_factory.mktemp("devsim")
    proc = subprocess.Popen(
        [binary, "dev", "--data-dir", str(data), "--kafka-port", "0", "--http-addr", "127.0.0.1:0",
         "--sim", "--sim-max-requests", "4", "--sim-time-scale", "20"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(l) for l in proc.stdout], daemon=True).start()
    engines = {}
    try:
        while True:
            line = lines.get(timeout=120)
            m = re.match(r"\s+sim engine (\S+)\s+OpenAI API (\S+)", line)
            if m:
                engines[m.group(1)] = m.group(2)
            if line.startswith("goodput"):  # the report's last lines: the workload is done
                break
        yield engines
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def client(url):
    return openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=30)


def test_completions_and_chat_after_report(dev_fleet):
    c = client(dev_fleet["decode-0"])
    model = c.models.list().data[0].id
    r = c.completions.create(model=model, prompt="The quick brown fox", max_tokens=5)
    assert r.usage.completion_tokens == 5 and len(r.choices[0].text.split()) == 5
    assert r.choices[0].finish_reason == "length"
    parts, usage = [], None
    for ch in c.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=4,
                                        stream=True, stream_options={"include_usage": True}):
        if ch.choices:
            parts.append(ch.choices[0].delta.content or "")
        else:
            usage = ch.usage
    assert usage is not None and usage.completion_tokens == 4
    assert len("".join(parts).split()) == 4


def test_pd_handshake(dev_fleet):
    pre, dec = client(dev_fleet["prefill-0"]), client(dev_fleet["decode-1"])
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
