"""The workload and the checks of `make e2e` (scripts/e2e.sh).

Multi-turn chats through pdrouter's OpenAI front door, with the official
openai client: every conversation opens with a long system prompt of its own,
and each later turn resends the whole history plus one new question, so turn
k+1's prompt starts with turn k's. Turns go in rounds (turn 0 of every
conversation, then turn 1, ...), with a pause between rounds long enough for
the emulators' KV events of a round (flushed every second) to reach the
router's state before the next round is decided.

What it checks, failing loudly otherwise:
  - every request is answered, with content;
  - every follow-up turn's decision matched a cached prefix (cached_tokens > 0)
    and picked the decode worker of the conversation's previous turn, and the
    emulator that served it reports those prompt tokens cached too;
  - a turn decided `remote` went through the emulators' P/D exchange: the
    prefill emulators answered the prefill legs (finish reason remote_decode
    in their /metrics) and the decode emulator the rest;
  - both modes occur (first turns remote, follow-ups local).

It writes every decision id to --ids for `pdrouter export decisions
--check-outcomes`. With --check-metrics it reads pdrouter's /metrics instead
and checks that ingest counted KV events stored by every worker that served a
request, and successful scrapes. With --bench-report it prints aiperf's
results of `make e2e-bench` side by side, with the emulators' prefix-cache
hit rate.
"""
import argparse
import json
import os
import re
import sys
import time
import urllib.request

ROUNDS = 4
CONVERSATIONS = 6
ROUND_PAUSE_S = 2.5
# Between two requests: long enough for the router to learn from the
# outcomes topic that the previous one finished, so that a decode worker is
# not charged for a request it no longer runs (a load term that can outweigh
# the prefix credit, which is the router doing its job, not what this checks).
REQUEST_PAUSE_S = 0.3

WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa "
         "quebec romeo sierra tango uniform victor whiskey xray yankee zulu").split()


def system_prompt(conv):
    """A long system prompt that only conversation conv has (about 300 tokens)."""
    words = [WORDS[(conv * 7 + i * (conv + 3)) % len(WORDS)] + str(conv) for i in range(150)]
    return f"You are assistant number {conv}. Context: " + " ".join(words) + "."


def question(conv, turn):
    return f"Question {turn} of conversation {conv}: what comes after {WORDS[(conv + turn) % len(WORDS)]}?"


def get_json(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)


def metric_sum(url, name, labels=None):
    """The sum of the samples of one metric in an engine's Prometheus text."""
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    total = 0.0
    for line in text.splitlines():
        m = re.match(r"^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)", line)
        if not m or m.group(1) != name:
            continue
        if labels and not all(f'{k}="{v}"' in (m.group(2) or "") for k, v in labels.items()):
            continue
        total += float(m.group(3))
    return total


class Failures:
    def __init__(self):
        self.items = []

    def check(self, ok, what):
        if not ok:
            self.items.append(what)
            print(f"  FAIL {what}")
        return ok


def one_turn(client, model, messages, stream):
    """Sends one chat turn; returns (headers, text, usage)."""
    if stream:
        raw = client.chat.completions.with_raw_response.create(
            model=model, messages=messages, max_tokens=24, stream=True, stream_options={"include_usage": True})
        text, usage = "", None
        for chunk in raw.parse():
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
            if chunk.usage is not None:
                usage = chunk.usage
        return raw.headers, text, usage
    raw = client.chat.completions.with_raw_response.create(model=model, messages=messages, max_tokens=24)
    resp = raw.parse()
    return raw.headers, resp.choices[0].message.content or "", resp.usage


def run_workload(args):
    import openai

    engines = dict(kv.split("=", 1) for kv in args.engines.split(","))
    prefills = [w for w in engines if w.startswith("prefill")]
    remote_decode_before = sum(metric_sum(engines[w] + "/metrics", "vllm:request_success_total",
                                          {"finish_reason": "remote_decode"}) for w in prefills)
    client = openai.OpenAI(base_url=args.api + "/v1", api_key="unused", max_retries=0, timeout=60)
    f = Failures()
    histories = [[{"role": "system", "content": system_prompt(c)}] for c in range(CONVERSATIONS)]
    last_decode = [None] * CONVERSATIONS
    ids, rows = [], []
    modes = {"local": 0, "remote": 0}
    for turn in range(ROUNDS):
        if turn:
            time.sleep(ROUND_PAUSE_S)
        for conv in range(CONVERSATIONS):
            time.sleep(REQUEST_PAUSE_S)
            stream = conv % 2 == 1
            histories[conv].append({"role": "user", "content": question(conv, turn)})
            headers, text, usage = one_turn(client, args.model, histories[conv], stream)
            histories[conv].append({"role": "assistant", "content": text})
            did = headers.get("x-pdrouter-decision-id", "")
            f.check(did != "", f"conv {conv} turn {turn}: no decision id header")
            f.check(text != "", f"conv {conv} turn {turn}: empty answer")
            ids.append(did)
            d = get_json(f"{args.api}/v1/decisions/{did}")
            decode = d.get("decode_worker", {}).get("worker_id", "")
            prefill = (d.get("prefill_worker") or {}).get("worker_id", "")
            cached = int(d.get("cached_tokens", 0))
            mode = d.get("mode", "")
            modes[mode] = modes.get(mode, 0) + 1
            engine_cached = None
            if usage is not None and usage.prompt_tokens_details is not None:
                engine_cached = usage.prompt_tokens_details.cached_tokens
            rows.append((conv, turn, "stream" if stream else "whole", mode, decode, prefill or "-",
                         int(d.get("prompt_tokens", 0)), cached, engine_cached))
            f.check(headers.get("x-pdrouter-mode") == mode, f"conv {conv} turn {turn}: mode header "
                    f"{headers.get('x-pdrouter-mode')} but decision {mode}")
            if mode == "remote":
                f.check(prefill in prefills, f"conv {conv} turn {turn}: remote without a prefill worker")
            if turn:
                # The router learned the prefix from the emulator's events:
                # the previous turn's decode worker is credited with it.
                held = [c for c in d.get("candidates", [])
                        if c.get("worker", {}).get("worker_id") == last_decode[conv]]
                f.check(held and int(held[0].get("overlap_blocks", 0)) > 0,
                        f"conv {conv} turn {turn}: no overlap credited to {last_decode[conv]}, which holds the prefix")
                f.check(cached > 0, f"conv {conv} turn {turn}: the decision matched no cached prefix")
                f.check(decode == last_decode[conv], f"conv {conv} turn {turn}: decode worker {decode}, "
                        f"but the prefix is on {last_decode[conv]}")
                # The emulator's own prefix cache confirms the hit. A remote
                # turn's decode leg pulls the prompt, so only local turns
                # are held to it.
                if mode == "local":
                    f.check(engine_cached is not None and engine_cached > 0,
                            f"conv {conv} turn {turn}: the emulator {decode} reports {engine_cached} cached tokens")
            last_decode[conv] = decode

    print(f"{'conv':>4} {'turn':>4} {'call':>6} {'mode':>6} {'decode':>8} {'prefill':>9} "
          f"{'prompt':>6} {'matched':>7} {'engine_cached':>13}")
    for r in rows:
        print(f"{r[0]:>4} {r[1]:>4} {r[2]:>6} {r[3]:>6} {r[4]:>8} {r[5]:>9} {r[6]:>6} {r[7]:>7} {str(r[8]):>13}")
    follow = [r for r in rows if r[1] > 0]
    print(f"requests {len(rows)}; local {modes.get('local', 0)}, remote {modes.get('remote', 0)}; "
          f"follow-up turns with a matched prefix on the same decode worker: "
          f"{sum(1 for r in follow if r[7] > 0)} of {len(follow)}")

    f.check(modes.get("remote", 0) > 0, "no decision was remote: the P/D exchange was not exercised")
    f.check(modes.get("local", 0) > 0, "no decision was local")
    remote_decode = sum(metric_sum(engines[w] + "/metrics", "vllm:request_success_total",
                                   {"finish_reason": "remote_decode"}) for w in prefills) - remote_decode_before
    print(f"prefill legs the prefill emulators answered (finish_reason remote_decode): {remote_decode:.0f}")
    f.check(remote_decode >= modes.get("remote", 0),
            f"the prefill emulators answered {remote_decode:.0f} prefill legs for {modes.get('remote', 0)} remote decisions")
    with open(args.ids, "w") as out:
        out.write("".join(i + "\n" for i in ids if i))
    return f


def samples(text, name):
    """(labels, value) of every sample of one metric in Prometheus text."""
    out = []
    for line in text.splitlines():
        m = re.match(r"^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)", line)
        if m and m.group(1) == name:
            out.append((dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or "")), float(m.group(3))))
    return out


def check_metrics(args):
    """pdrouter's /metrics: ingest counted the emulators' stored blocks and
    scrapes, and nothing of their stream was lost or misread."""
    f = Failures()
    text = open(args.check_metrics).read()
    stored = {l.get("source", ""): v for l, v in samples(text, "pdrouter_ingest_events_total") if l.get("type") == "stored"}
    scrapes_ok = sum(v for l, v in samples(text, "pdrouter_ingest_scrapes_total") if l.get("result") == "ok")
    print(f"pdrouter_ingest_events_total{{type=\"stored\"}} by source: {stored}")
    print(f"pdrouter_ingest_scrapes_total{{result=\"ok\"}}: {scrapes_ok:.0f}")
    f.check(sum(stored.values()) > 0, "ingest counted no stored KV events")
    for w in filter(None, args.workers.split(",")):
        f.check(stored.get(w, 0) > 0, f"no stored KV events counted from {w}, which served requests")
    f.check(scrapes_ok > 0, "no successful /metrics scrape")
    # Nothing lost or misread: no gap after the first batch, no batch that
    # did not decode, no event demoted, and every stored block chained to
    # a parent the state knew (an orphan can never be matched).
    for name in ("pdrouter_ingest_gaps_total", "pdrouter_ingest_decode_errors_total",
                 "pdrouter_ingest_events_demoted_total", "pdrouter_kv_orphan_blocks_total"):
        total = sum(v for _, v in samples(text, name))
        print(f"{name}: {total:.0f}")
        f.check(total == 0, f"{name} is {total:.0f}, want 0")
    # The emulator numbers its batches from 1, vLLM from 0, and has no
    # replay socket: ingest reports seq 0 as lost once per emulator at first
    # contact (docs/e2e.md), and never again.
    for l, v in samples(text, "pdrouter_ingest_source_resets_total"):
        if l.get("reason") == "unrecoverable_gap":
            f.check(v <= 1, f"{v:.0f} unrecoverable gaps from {l.get('source')}, want at most the first contact's")
    return f


def bench_report(spec):
    """A table of aiperf's results (profile_export_aiperf.json) and of the
    emulators' own prefix-cache counters (engine-*.prom), one column a run."""
    import glob
    cols = []
    for item in spec.split(","):
        name, path = item.split("=", 1)
        d = json.load(open(f"{path}/profile_export_aiperf.json"))
        hits = queries = 0.0
        for prom in glob.glob(f"{path}/engine-*.prom"):
            text = open(prom).read()
            # The emulator's names, and vLLM's (with the counters' _total).
            for suffix in ("", "_total"):
                hits += sum(v for _, v in samples(text, "vllm:prefix_cache_hits" + suffix))
                queries += sum(v for _, v in samples(text, "vllm:prefix_cache_queries" + suffix))
        # The serving engine's own count, from each answer's usage
        # (prompt_tokens_details.cached_tokens), as aiperf recorded it per
        # request: a remote prefill's prompt is counted once, where the
        # fleet's counters count it on the prefill and the decode worker.
        read = prompt = 0.0
        for line in open(f"{path}/profile_export.jsonl"):
            r = json.loads(line).get("metrics", {})
            read += r.get("usage_prompt_cache_read_tokens", {}).get("value", 0)
            prompt += r.get("usage_prompt_tokens", {}).get("value", 0)
        m = lambda k, stat: d.get(k, {}).get(stat)
        added = "-"
        if os.path.exists(f"{path}/router-after.prom"):
            def delta(name):
                after = sum(v for _, v in samples(open(f"{path}/router-after.prom").read(), name))
                return after - sum(v for _, v in samples(open(f"{path}/router-before.prom").read(), name))
            n = delta("pdrouter_door_added_latency_seconds_count")
            t = delta("pdrouter_door_tokenize_seconds_count")
            if n:
                added = (f"{delta('pdrouter_door_added_latency_seconds_sum') / n * 1e3:.1f} "
                         f"({delta('pdrouter_door_tokenize_seconds_sum') / t * 1e3 if t else 0:.1f})")
        errors = sum(e.get("count", 0) for e in (d.get("error_summary") or []))
        cols.append((name, [
            ("requests (errors)", f"{m('request_count', 'avg'):.0f} ({errors})"),
            ("TTFT p50 / p99 ms", f"{m('time_to_first_token', 'p50'):.1f} / {m('time_to_first_token', 'p99'):.1f}"),
            ("ITL mean / p99 ms", f"{m('inter_token_latency', 'avg'):.2f} / {m('inter_token_latency', 'p99'):.2f}"),
            ("router added ms mean (tokenize)", added),
            ("request latency p50 ms", f"{m('request_latency', 'p50'):.1f}"),
            ("throughput req/s", f"{m('request_throughput', 'avg'):.2f}"),
            ("goodput req/s (share)", f"{m('goodput', 'avg'):.2f} ({m('goodput', 'avg') / m('request_throughput', 'avg'):.0%})"),
            ("prompt tokens cached (serving)", f"{read / prompt:.1%} of {prompt:.0f}" if prompt else "n/a"),
            ("prefix-cache hit rate (fleet)", f"{hits / queries:.1%} of {queries:.0f}" if queries else "n/a"),
        ]))
    rows = [r for r, _ in cols[0][1]]
    print(f"{'':32}" + "".join(f"{n:>28}" for n, _ in cols))
    for i, r in enumerate(rows):
        print(f"{r:32}" + "".join(f"{c[i][1]:>28}" for _, c in cols))
    return Failures()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--api")
    p.add_argument("--model")
    p.add_argument("--engines", help="worker=http_url,...")
    p.add_argument("--ids", help="file to write the decision ids to")
    p.add_argument("--check-metrics", help="pdrouter /metrics text to check instead of running the workload")
    p.add_argument("--workers", default="", help="workers that served requests: each must have stored blocks counted")
    p.add_argument("--bench-report", help="name=aiperf_artifact_dir,... to print side by side")
    args = p.parse_args()
    if args.bench_report:
        f = bench_report(args.bench_report)
    else:
        f = check_metrics(args) if args.check_metrics else run_workload(args)
    if f.items:
        print(f"{len(f.items)} check(s) failed", file=sys.stderr)
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
