"""Hostile inputs against a real pdrouter: no peer, request or log record may
crash, stall or poison a replica.

Every attack runs against `pdrouter dev` (embedded broker, ingest bound with
--bind) and, when PDR_TEST_BROKERS names a real Kafka, against
`pdrouter serve --ingest` on it (its own topic prefix, migrated first). Each
target is started once per module and restarted only when an attack left it
unusable, so one failing attack cannot hide the result of the next one.
hostile_target.Guard checks, around every attack, that the process lives,
good traffic keeps its latency, good decisions and workers are not lost, and
memory stays within the bound each test states. The attacks themselves check
that the refusal is precise: the HTTP status and error code of the shared
contract, or the pdrouter_rejected_total{entry,reason} series.

The binary is PDR_BIN when set, otherwise built from this checkout once per
session.
"""
import os
import pathlib
import socket
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import zmq

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
import hostile_target as ht  # noqa: E402
import zmq_kv_publisher as zp  # noqa: E402
import zmtp_raw as zr  # noqa: E402

MiB = 1024 * 1024


@pytest.fixture(scope="module", params=["dev", "serve"])
def started(request, pdrouter_bin, tmp_path_factory):
    brokers = None
    if request.param == "serve":
        brokers = os.environ.get("PDR_TEST_BROKERS", "").strip()
        if not brokers:
            if os.environ.get("CI") == "true":
                pytest.fail("PDR_TEST_BROKERS is not set under CI=true: the serve target needs the real broker")
            pytest.skip("PDR_TEST_BROKERS not set: the `serve --ingest` target needs a real Kafka (make test)")
    t = ht.Target(request.param, pdrouter_bin, tmp_path_factory.mktemp(f"hostile-{request.param}"), brokers)
    t.start()
    yield t
    t.stop()


@pytest.fixture
def target(started):
    """The module's target, restarted first if an earlier attack left it
    dead, unhealthy or stalled."""
    if not started.usable():
        started.restart("unusable before this test")
    return started


# -- engines the attacks stand up --------------------------------------------


class Publisher:
    """A real pyzmq PUB in vLLM's wire format (zmq_kv_publisher's structs)."""

    def __init__(self, connect=None, topic=b""):
        self.ctx = zmq.Context()
        self.pub = self.ctx.socket(zmq.PUB)
        self.pub.setsockopt(zmq.LINGER, 0)
        self.pub.setsockopt(zmq.SNDHWM, 1000)
        self.monitor = self.pub.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
        self.topic, self.seq = topic, 0
        if connect:
            self.pub.connect(connect)
            self.endpoint = connect
        else:
            self.pub.bind("tcp://127.0.0.1:*")
            self.endpoint = self.pub.getsockopt(zmq.LAST_ENDPOINT).decode()

    def wait_subscriber(self, timeout=15.0):
        if not self.monitor.poll(int(timeout * 1000)):
            return False
        self.monitor.recv_multipart()
        time.sleep(0.3)  # the SUBSCRIBE follows the handshake
        return True

    def send(self, payload):
        self.pub.send_multipart([self.topic, self.seq.to_bytes(8, "big"), payload])
        self.seq += 1

    def close(self):
        self.pub.disable_monitor()
        self.monitor.close(0)
        self.pub.close(0)
        self.ctx.term()


def stored_batch(ts, first_hash, tokens, block_size=16):
    """One BlockStored of len(tokens)/block_size chained blocks, map generation."""
    BlockStored, _, _ = zp.GENERATIONS["map"]
    n = len(tokens) // block_size
    ev = BlockStored(block_hashes=list(range(first_hash, first_hash + n)), parent_block_hash=None,
                     token_ids=tokens, block_size=block_size, lora_id=None, medium="GPU", lora_name=None,
                     extra_keys=None, group_idx=0, kv_cache_spec_kind="full_attention")
    return zp.ENCODER.encode(zp.EventBatch(ts=ts, events=[ev], data_parallel_rank=0))


def cached_blocks(target, worker):
    return sum(w.get("cached_blocks") or 0 for wid, w in target.workers().items() if wid == worker)


def wait_cached(target, worker, want, timeout, resend=None):
    """Polls until worker holds at least `want` cached blocks; calls resend
    every 5 s (a PUB drops what it sends before the subscription lands)."""
    deadline = time.monotonic() + timeout
    next_send = time.monotonic() + 5
    have = 0
    while time.monotonic() < deadline and target.alive():
        have = cached_blocks(target, worker)
        if have >= want:
            return have
        if resend and time.monotonic() >= next_send:
            resend()
            next_send = time.monotonic() + 5
        time.sleep(0.25)
    return have


def register(target, worker_id, model="aux", **extra):
    body = {"worker_id": worker_id, "pool": "decode", "model": model, "block_size": 16, "total_kv_blocks": 100000}
    body.update(extra)
    return target.call("POST", "/v1/workers", body)


def deregister(target, worker_id):
    if target.alive():
        target.call("DELETE", f"/v1/workers/{worker_id}")


class HostileZmtpServer:
    """A TCP server posing as an engine's PUB socket: it greets, then sends a
    READY whose property runs past its frame; later connections get a READY
    declaring 2^62 bytes instead. It counts how often it is dialled."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        held = []
        self.sock.settimeout(0.2)
        while not self.stop:
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.accepted += 1
            try:
                c.sendall(zr.greeting(as_server=True))
                zr.read_greeting(c, timeout=2)
                c.sendall(zr.ready_truncated_property() if self.accepted % 2 == 1 else zr.huge_command_header())
            except OSError:
                pass
            held.append(c)
        for c in held:
            c.close()

    def close(self):
        self.stop = True
        self.sock.close()


VLLM_METRICS = b"""# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="aux"} 3
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="aux"} 1
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="aux"} 0.25
"""


class MetricsServers:
    """Two /metrics endpoints: one answers like vLLM, one accepts and never
    answers."""

    def __init__(self):
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(VLLM_METRICS)))
                self.end_headers()
                self.wfile.write(VLLM_METRICS)

            def log_message(self, *a):
                pass

        self.good = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.good.serve_forever, daemon=True).start()
        self.hang = socket.socket()
        self.hang.bind(("127.0.0.1", 0))
        self.hang.listen(128)  # the kernel accepts; nobody ever reads or answers
        self.good_url = f"http://127.0.0.1:{self.good.server_address[1]}/metrics"
        self.hang_url = f"http://127.0.0.1:{self.hang.getsockname()[1]}/metrics"

    def close(self):
        self.good.shutdown()
        self.good.server_close()
        self.hang.close()


# -- a. ZMTP ------------------------------------------------------------------


def test_zmtp_bind_hostile_peers(target):
    """Defect: ingest's bound SUB socket trusts its peers. A READY with a
    truncated property, frames declaring 2^62 bytes (allocated as declared),
    a peer that never speaks and hundreds of idle connections must each be cut
    and counted (zmq_bind: bad_handshake, frame_too_large, handshake_timeout,
    too_many_connections), while a real publisher's events still arrive.

    Memory bound 64 MB: 300 idle TCP connections cost a goroutine and a read
    buffer each (tens of KB); one 2^62-byte allocation attempt, or buffering
    by declared size, is orders of magnitude above."""
    with ht.Guard(target, "ZMTP peers on --bind", rss_bound=64 * MiB) as g:
        port = target.bind_port
        silent = zr.connect(port)
        silent_since = time.monotonic()

        s = zr.connect(port)
        s.sendall(zr.greeting())
        zr.read_greeting(s)
        s.sendall(zr.ready_truncated_property())
        g.check(zr.closed_by_peer(s, 5), "a READY with a truncated property: the connection stayed open 5 s")
        s.close()
        g.expect_rejected("zmq_bind", "bad_handshake")

        s = zr.connect(port)
        s.sendall(zr.greeting())
        zr.read_greeting(s)
        s.sendall(zr.huge_command_header())
        g.check(zr.closed_by_peer(s, 5), "a command frame declaring 2^62 bytes: the connection stayed open 5 s")
        s.close()
        g.sample_rss()
        after_cmd = g.expect_rejected("zmq_bind", "frame_too_large")

        s = zr.connect(port)
        s.sendall(zr.greeting())
        zr.read_greeting(s)
        s.sendall(zr.ready())
        time.sleep(0.2)
        s.sendall(zr.huge_message_header())
        g.check(zr.closed_by_peer(s, 5), "a message frame declaring 2^62 bytes: the connection stayed open 5 s")
        s.close()
        g.sample_rss()
        g.expect_rejected("zmq_bind", "frame_too_large", since=after_cmd)

        idle = []
        try:
            for _ in range(300):
                try:
                    idle.append(zr.connect(port, timeout=2))
                except OSError:
                    break
            time.sleep(1.0)
            g.sample_rss()
            if g.need_flag("--zmq-max-conns"):
                g.expect_rejected("zmq_bind", "too_many_connections")
        finally:
            for c in idle:
                c.close()

        g.check(zr.closed_by_peer(silent, max(0.1, 15 - (time.monotonic() - silent_since))),
                "a peer that connected and never spoke was still connected after 15 s")
        silent.close()
        g.expect_rejected("zmq_bind", "handshake_timeout", within=2)

        # A real engine connecting to --bind still gets its events in.
        worker = "bind-pub"
        g.expect(register(target, worker, kv_events_topic=worker), 202, what="registering the bound publisher's worker")
        pub = Publisher(connect=f"tcp://127.0.0.1:{port}", topic=worker.encode())
        try:
            payload = stored_batch(time.time(), 7_000_000, list(range(1, 33)))
            pub.wait_subscriber()
            pub.send(payload)
            have = wait_cached(target, worker, 2, 20, resend=lambda: pub.send(payload))
            g.check(have >= 2, f"a real pyzmq publisher on --bind: {have} of 2 blocks arrived within 20 s")
        finally:
            pub.close()
            deregister(target, worker)


def test_zmtp_hostile_engine_server(target):
    """Defect: ingest dials whatever kv_events_endpoint a registration names
    and trusts the server's handshake. A server answering with a READY whose
    property runs past its frame, or a command declaring 2^62 bytes, must be
    refused and counted (zmq_dial: bad_handshake, frame_too_large), and
    redialled with backoff, not in a tight loop.

    Memory bound 64 MB: the refused handshakes hold nothing."""
    srv = HostileZmtpServer()
    worker = "evil-engine"
    try:
        with ht.Guard(target, "hostile ZMTP server as kv_events_endpoint", rss_bound=64 * MiB) as g:
            g.expect(register(target, worker, kv_events_endpoint=f"tcp://127.0.0.1:{srv.port}"), 202,
                     what="registering a worker whose engine is the hostile server")
            g.expect_rejected("zmq_dial", "bad_handshake", within=10)
            g.expect_rejected("zmq_dial", "frame_too_large", within=10)
            g.sample_rss()
            n0, t0 = srv.accepted, time.monotonic()
            time.sleep(3)
            rate = (srv.accepted - n0) / (time.monotonic() - t0)
            g.check(rate <= 20, f"ingest redialled the hostile server {rate:.0f} times/s (want backoff, ≤ 20/s)")
            deregister(target, worker)
    finally:
        srv.close()


# -- b. registration dp_size --------------------------------------------------


def test_registration_dp_size_max_uint32(target):
    """Defect: dp_size is trusted: a registration with dp_size 4294967295
    makes every replica allocate per declared rank on apply (gigabytes) and
    stall. It must be refused with 422 invalid_value on dp_size.

    Memory bound 64 MB: a refused registration costs nothing; the old code
    grows by gigabytes here (the watchdog stops it at the ceiling)."""
    with ht.Guard(target, "registration with dp_size 2^32-1", rss_bound=64 * MiB) as g:
        r = register(target, "dp-huge", dp_size=4294967295)
        g.expect(r, 422, "invalid_value", "dp_size", what="POST /v1/workers dp_size 4294967295")
        for _ in range(15):  # let a registration that got through be applied
            time.sleep(0.1)
            g.sample_rss()


# -- c. a large, valid BlockStored --------------------------------------------


def test_zmq_blockstored_350k_tokens(target):
    """Defect: one valid BlockStored of 350,000 tokens (21,875 blocks of 16)
    from an engine becomes a record larger than the broker takes, so ingest
    fails or drops it. Ingest must keep running and the blocks must arrive.

    Memory bound 256 MB: the message is ~1.7 MB of msgpack, its decoded
    tokens ~3 MB and the blocks' index entries a few MB; the bound leaves room
    for copies into records and the collector's slack, and still catches a
    process that buffers per token or per declared size."""
    worker = "big-kv"
    tokens = [(i * 7919) % 50000 + 1 for i in range(350_000)]
    payload = stored_batch(time.time(), 9_000_000, tokens)
    pub = Publisher()
    try:
        with ht.Guard(target, "350k-token BlockStored over ZMQ", rss_bound=256 * MiB) as g:
            g.expect(register(target, worker, kv_events_endpoint=pub.endpoint), 202, what="registering big-kv")
            g.check(pub.wait_subscriber(), "ingest did not connect to the publisher within 15 s")
            pub.send(payload)
            have = wait_cached(target, worker, 21_875, 40, resend=lambda: pub.send(payload))
            g.sample_rss()
            g.check(have >= 21_875, f"{have} of 21875 blocks of the 350k-token BlockStored arrived within 40 s")
            deregister(target, worker)
    finally:
        pub.close()


# -- d. duplicate keys --------------------------------------------------------


def test_route_470kb_duplicate_after_keys(target):
    """Defect: the JSON decoder keeps the last of duplicate keys, so 470 KB of
    repeated `after` entries is parsed in full and then waited on until the
    after timeout. It must be refused fast: 400 duplicate_key within 1 s, with
    a small answer.

    Memory bound 32 MB: the body is 470 KB."""
    entry = b'"0":1,'
    n = 470 * 1024 // len(entry)
    body = (b'{"request_id":"dup-' + uuid.uuid4().hex.encode() + b'","model":"llama","token_ids":[1,2,3],'
            b'"after":{"kv-events":{' + entry * n + b'"0":1}}}')
    with ht.Guard(target, "470 KB of duplicate after keys", rss_bound=32 * MiB) as g:
        r = target.call("POST", "/v1/route", raw=body, timeout=30)
        g.expect(r, 400, "duplicate_key", what=f"POST /v1/route with {len(body)} bytes of duplicate after keys")
        g.check(r.elapsed < 1.0, f"the answer took {r.elapsed:.2f} s (want < 1 s)")
        g.check(len(r.body) < 4096, f"the answer is {len(r.body)} bytes (want < 4 KB)")


# -- e. long prompts that are within limits ------------------------------------


def test_route_long_prompts_within_limits(target):
    """Defect: a prompt the API accepts can make a decision record larger
    than the decisions topic takes, answered as a retryable 503 that will
    never succeed. A prompt of exactly --max-prompt-tokens, and 150,000 tokens
    on a block_size 1 worker, must be answered 200.

    Memory bound 256 MB: the largest body is ~4 MB of JSON, ~8 MB of tokens
    and ~1 MB of block hashes; a decision record of at most a few MB."""
    limit = int(ht.flag_default(target.help, "--max-prompt-tokens") or 0)
    with ht.Guard(target, "prompts at the limits", rss_bound=256 * MiB) as g:
        g.check(limit > 0, "no default for --max-prompt-tokens in --help")
        if limit:
            toks = b",".join(str(i % 10).encode() for i in range(limit))
            body = b'{"request_id":"max-' + uuid.uuid4().hex.encode() + b'","model":"llama","token_ids":[' + toks + b"]}"
            r = target.call("POST", "/v1/route", raw=body, timeout=120)
            g.sample_rss()
            g.expect(r, 200, what=f"POST /v1/route with exactly --max-prompt-tokens={limit} tokens")
        r = target.call("POST", "/v1/route", {"request_id": f"bs1-{uuid.uuid4().hex}", "model": "tiny",
                                               "token_ids": [i % 1000 for i in range(150_000)]}, timeout=120)
        g.sample_rss()
        g.expect(r, 200, what="POST /v1/route with 150,000 tokens for a block_size 1 worker")


# -- f. slow bodies -----------------------------------------------------------


def test_http_slow_bodies(target):
    """Defect: the HTTP server has no read timeout and sizes its body buffer
    from Content-Length: 200 connections each declaring 16 MB and sending
    nothing hold memory and goroutines forever. Memory must stay bounded and,
    with --http-read-timeout, every one is cut (408 or closed, counted
    http/read_timeout).

    Memory bound 64 MB: each held connection costs a goroutine and its read
    buffer (tens of KB, a few MB for 200); buffers sized from the declared
    length would be 3.2 GB."""
    head = (f"POST /v1/route HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {ht.TOKEN}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {16 * MiB}\r\n\r\n").encode()
    with ht.Guard(target, "200 connections declaring 16 MB bodies", rss_bound=64 * MiB) as g:
        conns = []
        try:
            for _ in range(200):
                c = socket.create_connection(("127.0.0.1", target.http_port), timeout=5)
                c.sendall(head + b'{"request_id":')
                conns.append(c)
            time.sleep(1.0)
            g.sample_rss()
            if g.need_flag("--http-read-timeout"):
                cut = sum(zr.closed_by_peer(c, 2 + 6) for c in conns)
                g.check(cut == len(conns), f"{len(conns) - cut} of {len(conns)} stalled bodies still open "
                                           f"8 s after they started (--http-read-timeout 2s)")
                g.expect_rejected("http", "read_timeout")
        finally:
            for c in conns:
                c.close()


# -- g. time skew -------------------------------------------------------------


def test_timestamps_far_in_the_future(target):
    """Defect: event times are trusted: a load sample dated 2096, or a KV
    event batch with ts 9.5e9, moves the state's clock (ages, expiry) for
    everyone; a batch dated an hour ahead (a plausible fast clock) stopped
    ingest. The HTTP sample must get 422 invalid_value on ts, and both ZMQ
    batches must be refused while the engine's next good batch is applied.

    Memory bound 32 MB: two small messages."""
    worker = "skewed"
    pub = Publisher()
    try:
        with ht.Guard(target, "far-future timestamps", rss_bound=32 * MiB) as g:
            r = target.call("POST", "/v1/events/load", {
                "worker_id": "decode-1", "dp_rank": 0, "ts": 3_976_300_000.0, "num_requests_running": 1,
                "num_requests_waiting": 0, "kv_used_blocks": 1, "kv_total_blocks": 16384})
            g.expect(r, 422, "invalid_value", "ts", what="POST /v1/events/load dated 2096")
            g.expect(register(target, worker, kv_events_endpoint=pub.endpoint), 202, what="registering skewed")
            g.check(pub.wait_subscriber(), "ingest did not connect to the publisher within 15 s")
            bad = stored_batch(9.5e9, 8_000_000, list(range(100, 116)))
            ahead = stored_batch(time.time() + 3600, 8_050_000, list(range(150, 166)))
            good = stored_batch(time.time(), 8_100_000, list(range(200, 216)))

            def send_both():
                pub.send(bad)
                pub.send(ahead)
                pub.send(good)

            send_both()
            have = wait_cached(target, worker, 1, 20, resend=send_both)
            time.sleep(0.5)
            have = cached_blocks(target, worker)
            g.check(have == 1, f"after batches dated ts 9.5e9 and an hour ahead, then a good one, {worker} holds {have} cached blocks "
                               f"(want 1: the good one only)")
            deregister(target, worker)
    finally:
        pub.close()


# -- h. metrics_url -----------------------------------------------------------


def test_metrics_url_metadata_and_hang(target):
    """Defect: ingest fetches any metrics_url: a registration pointing at the
    cloud metadata address is fetched (SSRF), and one that never answers
    holds up the other workers' scrapes. The registration is accepted (the
    API may run apart from ingest and its --engine-allow), and ingest never
    fetches it: counted scrape/not_allowed. A good worker's load samples keep
    arriving every --scrape-interval.

    Memory bound 32 MB: a few scrapes."""
    servers = MetricsServers()
    try:
        with ht.Guard(target, "metrics_url at 169.254.169.254 and one that hangs", rss_bound=32 * MiB) as g:
            r = register(target, "meta-1", metrics_url="http://169.254.169.254/latest/meta-data/")
            g.expect(r, 202, what="registering meta-1")
            g.expect_rejected("scrape", "not_allowed", within=5)
            g.expect(register(target, "scrape-hang", metrics_url=servers.hang_url), 202, what="registering scrape-hang")
            g.expect(register(target, "scrape-ok", metrics_url=servers.good_url), 202, what="registering scrape-ok")
            samples = set()
            deadline = time.monotonic() + 8
            while time.monotonic() < deadline:
                load = (target.workers().get("scrape-ok") or {}).get("load")
                if load:
                    samples.add(load.get("sample_time"))
                time.sleep(0.25)
            g.check(len(samples) >= 3, f"scrape-ok got {len(samples)} distinct load samples in 8 s with "
                                       f"--scrape-interval 1s while scrape-hang never answers (want ≥ 3)")
            for w in ("meta-1", "scrape-hang", "scrape-ok"):
                deregister(target, w)
    finally:
        servers.close()


# -- j. smaller gaps ------------------------------------------------------------


def _route(target, **body):
    body.setdefault("request_id", f"gap-{uuid.uuid4().hex}")
    body.setdefault("model", "llama")
    return target.call("POST", "/v1/route", body)


def _conflict(target):
    rid = f"gap-{uuid.uuid4().hex}"
    first = _route(target, request_id=rid, token_ids=list(range(1, 40)))
    assert first.status == 200, f"the first request of the pair: {first!r}"
    return _route(target, request_id=rid, token_ids=list(range(2, 41)))


def _big_header(target):
    # Over the limit the target was started with, or over Go's default (1 MB).
    size = 64 * 1024 if target.has("--http-max-header-bytes") else 1100 * 1024
    return target.call("GET", "/v1/workers", headers={"X-Pad": "a" * size})


GAPS = {
    # name: (attack, status, code, field, defect)
    "after_offset_max_int64": (
        lambda t: _route(t, token_ids=[1, 2, 3], after={"kv-events": {"0": 9223372036854775807}}),
        422, "invalid_value", "after", "an after offset past any real log is waited on, or overflows"),
    "request_id_conflict": (
        _conflict, 409, "request_id_conflict", None,
        "a reused request_id with another prompt silently gets the first request's decision"),
    "negative_prompt_tokens": (
        lambda t: _route(t, block_hashes=[1, 2], block_size=16, prompt_tokens=-5),
        422, "invalid_value", "prompt_tokens", "a negative prompt_tokens is taken for a size and answered 413"),
    "case_folded_key": (
        lambda t: t.call("POST", "/v1/route", raw=b'{"Request_ID":"gap-case","model":"llama","token_ids":[1,2,3]}'),
        400, "unknown_field", None, "encoding/json matches keys case-insensitively"),
    "kv_events_topic_10kb": (
        lambda t: register(t, "gap-topic", kv_events_topic="t" * 10240),
        422, "invalid_value", "kv_events_topic", "a 10 KB topic is stored and subscribed to"),
    "worker_id_dotdot": (
        lambda t: register(t, ".."), 422, "invalid_value", "worker_id", "worker id '..' is accepted"),
    "empty_token_ids": (
        lambda t: _route(t, token_ids=[]), 422, "invalid_value", "token_ids",
        "an empty prompt gets a decision"),
    "trailing_slash": (
        lambda t: t.call("GET", "/v1/workers/"), 404, "no_route", None,
        "a trailing slash is answered with Gin's 301 redirect, not the API's JSON 404"),
    "header_block_over_limit": (
        _big_header, 431, "headers_too_large", None,
        "an oversized header block gets net/http's plain-text 431, not the API's JSON error"),
    "auth_unknown_path": (
        lambda t: t.call("GET", "/v1/no-such-endpoint", auth=False), 401, "unauthorized", None,
        "with --auth-token, an unknown /v1 path answers 404 to anyone, revealing the routes"),
    "auth_wrong_method": (
        lambda t: t.call("DELETE", "/v1/route", auth=False), 401, "unauthorized", None,
        "with --auth-token, a wrong method answers 405 to anyone, revealing the routes"),
}


@pytest.mark.parametrize("gap", list(GAPS))
def test_small_gaps(target, gap):
    """Defects: the API's smaller gaps (see each case's defect text); each
    must be answered with the shared contract's status, code and field.

    Memory bound 32 MB: every request is small but the 1.1 MB header."""
    attack, status, code, field, defect = GAPS[gap]
    with ht.Guard(target, f"{gap}: {defect}", rss_bound=32 * MiB) as g:
        g.expect(attack(target), status, code, field, what=gap)
        if gap == "header_block_over_limit":
            g.need_flag("--http-max-header-bytes")
            g.expect_rejected("http", "headers_too_large")


# -- i. the worker cap (last: it fills the target's registry) ------------------


def test_worker_cap_and_unknown_ids(target):
    """Defect: registrations are unbounded: 5,000 distinct workers (any
    caller can send them) grow every replica's state and every decision's
    candidate scan. Past --max-workers they must get 422 too_many_workers
    (counted registration/too_many_workers); KV events and load for
    unregistered workers, and a dp_rank at or above dp_size, are refused.

    Memory bound 96 MB: the cap keeps the registry at 50 workers; 5,000
    registrations answered and written to the log are the attack's own
    traffic. Runs last in the module: it fills the cap."""
    with ht.Guard(target, "5,000 worker registrations over the cap", rss_bound=96 * MiB) as g:
        g.need_flag("--max-workers")
        statuses, first_refusal = {}, None
        conn = None
        for i in range(5000):
            if conn is None:
                conn = ht.http.client.HTTPConnection("127.0.0.1", target.http_port, timeout=10)
            body = ('{"worker_id":"flood-%d","pool":"decode","model":"flood","block_size":16}' % i).encode()
            try:
                conn.request("POST", "/v1/workers", body=body, headers={
                    "Content-Type": "application/json", "Authorization": f"Bearer {ht.TOKEN}"})
                resp = conn.getresponse()
                out = resp.read()
            except OSError as e:
                g.problem(f"registration {i} failed: {e!r}")
                break
            statuses[resp.status] = statuses.get(resp.status, 0) + 1
            if resp.status != 202 and first_refusal is None:
                first_refusal = ht.Resp(resp.status, {}, out, 0)
            if i % 500 == 0:
                g.sample_rss()
        if conn:
            conn.close()
        g.check(first_refusal is not None, f"all 5000 registrations were accepted: {statuses}")
        if first_refusal is not None:
            g.expect(first_refusal, 422, "too_many_workers", what="the first refused registration")
        g.expect_rejected("registration", "too_many_workers")
        listed = len(target.workers())
        g.check(listed <= 50, f"{listed} workers listed with --max-workers 50")

        g.expect(target.call("POST", "/v1/events/load", {
            "worker_id": "ghost-worker", "dp_rank": 0, "ts": time.time(), "num_requests_running": 1,
            "num_requests_waiting": 0, "kv_used_blocks": 1, "kv_total_blocks": 10}), 422, None, "worker_id",
            what="load for an unregistered worker")
        g.expect(target.call("POST", "/v1/events/kv", {
            "worker_id": "ghost-worker", "dp_rank": 0, "ts": time.time(), "events": [{"type": "cleared"}]}),
            422, None, "worker_id", what="KV events for an unregistered worker")
        g.expect(target.call("POST", "/v1/events/load", {
            "worker_id": "decode-1", "dp_rank": 7, "ts": time.time(), "num_requests_running": 1,
            "num_requests_waiting": 0, "kv_used_blocks": 1, "kv_total_blocks": 16384}), 422, "invalid_value",
            "dp_rank", what="load with dp_rank 7 for a worker of dp_size 1")
