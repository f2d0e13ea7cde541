"""Hostile ZMTP peers against `pdrouter dev --bind`, then a real libzmq PUB.

Each hostile peer is a raw socket writing bytes built here by hand (not by
pdrouter's codec, not by libzmq): a truncated READY property, frames that
declare 2^62 bytes, a wrong signature or mechanism, a peer that never
finishes the handshake, more connections than --zmq-max-conns. The process
must survive all of them, count each in pdrouter_rejected_total
{entry="zmq_bind"}, and still ingest what a pyzmq PUB publishes afterwards.
"""
import os
import pathlib
import re
import socket
import struct
import subprocess
import sys
import time
import json
import urllib.request

import pytest
import zmq

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
import zmq_kv_publisher as z  # noqa: E402

VECTORS = ROOT / "testdata" / "kv-events" / "vectors.json"


def greeting(mechanism=b"NULL", major=3, sig_end=0x7F):
    g = bytearray(64)
    g[0], g[9], g[10] = 0xFF, sig_end, major
    g[12:12 + len(mechanism)] = mechanism
    return bytes(g)


def frame(flags, body):
    if len(body) > 255:
        return bytes([flags | 0x02]) + struct.pack(">Q", len(body)) + body
    return bytes([flags, len(body)]) + body


def command(name, data):
    return frame(0x04, bytes([len(name)]) + name + data)


def prop(name, value):
    return bytes([len(name)]) + name + struct.pack(">I", len(value)) + value


def long_header(flags, size):
    return bytes([flags | 0x02]) + struct.pack(">Q", size)


GOOD_PUB = greeting() + command(b"READY", prop(b"Socket-Type", b"PUB"))

HOSTILE = {
    "truncated READY property": (greeting() + command(b"READY", prop(b"Socket-Type", b"PUB")[:14]), "bad_handshake"),
    "command frame of 2^62 bytes": (greeting() + long_header(0x04, 1 << 62), "frame_too_large"),
    "message frame of 2^62 bytes": (GOOD_PUB + long_header(0x00, 1 << 62), "frame_too_large"),
    "wrong signature": (greeting(sig_end=0x00), "bad_greeting"),
    "wrong mechanism": (greeting(b"CURVE"), "bad_greeting"),
    "reserved flag bits": (GOOD_PUB + frame(0x80, b"x"), "bad_frame"),
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def dev(tmp_path_factory, pdrouter_bin):
    tmp = tmp_path_factory.mktemp("zmtp")
    binary = pdrouter_bin
    # The bind port is picked here, closed and passed on, so another process
    # may take it first: dev then exits once ingest fails to bind it (after
    # it printed its API address), and is started again on another port.
    for attempt in range(3):
        bind = f"tcp://127.0.0.1:{free_port()}"
        proc = subprocess.Popen(
            [str(binary), "dev", "--data-dir", str(tmp / f"data-{attempt}"), "--kafka-port", "0", "--http-addr", "127.0.0.1:0",
             "--bind", bind, "--zmq-handshake-timeout", "1s", "--zmq-max-conns", "4", "--scrape-interval", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env={**os.environ, "PDR_LOG_LEVEL": "warn"})
        api = None
        deadline = time.time() + 120
        while api is None and time.time() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            m = re.search(r"api\s+(http://\S+)", line)
            if m:
                api = m.group(1)
        if api is not None:
            wait_for(lambda: proc.poll() is not None or "pdrouter_rejected_total" in metrics_text(api), 30, "ingest's metrics")
            time.sleep(0.5)  # a bind that failed stops dev a moment later
            if proc.poll() is None:
                break
            api = None
        proc.kill()
        proc.wait()
    if api is None:
        pytest.fail("pdrouter dev did not start, three times")
    yield proc, api, bind
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


def metrics_text(api):
    try:
        with urllib.request.urlopen(api + "/metrics", timeout=5) as r:
            return r.read().decode()
    except OSError:
        return ""


def metric(api, name, **labels):
    total = 0.0
    for line in metrics_text(api).splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def rejected(api, reason):
    return metric(api, "pdrouter_rejected_total", entry="zmq_bind", reason=reason)


def wait_for(cond, seconds, what):
    deadline = time.time() + seconds
    while not cond():
        if time.time() > deadline:
            pytest.fail(f"timed out after {seconds}s waiting for {what}")
        time.sleep(0.05)


def connect(bind):
    host, port = bind[len("tcp://"):].rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def closed_by_peer(s, seconds):
    s.settimeout(seconds)
    try:
        while s.recv(65536):
            pass
    except ConnectionResetError:
        pass
    except socket.timeout:
        return False
    return True


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_peer_is_refused_and_counted(dev, name):
    proc, api, bind = dev
    data, reason = HOSTILE[name]
    before = rejected(api, reason)
    with connect(bind) as s:
        s.sendall(data)
        assert closed_by_peer(s, 10), "the hostile connection was kept open"
    wait_for(lambda: rejected(api, reason) == before + 1, 10, f"{reason} counted")
    assert proc.poll() is None, "pdrouter exited"


def test_silent_peer_times_out(dev):
    proc, api, bind = dev
    before = rejected(api, "handshake_timeout")
    with connect(bind) as s:
        s.sendall(greeting()[:20])
        start = time.time()
        assert closed_by_peer(s, 10)
        assert time.time() - start >= 0.5, "dropped before --zmq-handshake-timeout"
    wait_for(lambda: rejected(api, "handshake_timeout") == before + 1, 10, "handshake_timeout counted")


def test_connections_over_the_cap_are_refused(dev):
    proc, api, bind = dev
    before = rejected(api, "too_many_connections")
    holders = []
    try:
        for _ in range(4):  # --zmq-max-conns 4; an idle publisher holds its slot
            s = connect(bind)
            holders.append(s)
            s.sendall(GOOD_PUB)
            assert len(s.recv(64)) > 0, "no greeting: the connection holds no slot"
        extra = connect(bind)
        with extra:
            assert closed_by_peer(extra, 5)
        wait_for(lambda: rejected(api, "too_many_connections") >= before + 1, 10, "too_many_connections counted")
    finally:
        for s in holders:
            s.close()


def test_libzmq_publisher_still_ingested(dev):
    proc, api, bind = dev
    payload = z.load_vectors(VECTORS)["map_BlockStored_batch"]
    # On --bind a registration names the topic its engine publishes under; ingest takes no other.
    reg = json.dumps({"worker_id": "py-1", "pool": "decode", "model": "m", "block_size": 16, "kv_events_topic": "kv@py-1"}).encode()
    req = urllib.request.Request(api + "/v1/workers", data=reg, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as r:
        assert r.status == 202, r.read()
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    try:
        pub.connect(bind)
        before = metric(api, "pdrouter_ingest_batches_total")
        seq = 0
        deadline = time.time() + 30
        # PUB drops what it sends before ingest's subscription arrives.
        while metric(api, "pdrouter_ingest_batches_total") < before + 5:
            assert time.time() < deadline, "the libzmq publisher's batches did not arrive"
            pub.send_multipart([b"kv@py-1", struct.pack(">Q", seq), payload])
            seq += 1
            time.sleep(0.05)
    finally:
        pub.close()
        ctx.term()
    assert proc.poll() is None
