"""A stand-in for an engine's KV-event publisher, for pdrouter's ingest tests.

It speaks the engines' wire protocol with real libzmq (pyzmq):

* a PUB socket sending 3-frame messages [topic, seq (8 bytes big-endian),
  payload], seq counting from 0 in this process;
* a ROUTER replay socket answering [identity, empty, start_seq] with every
  buffered (seq, payload) whose seq >= start_seq, then the end marker, in
  either reply generation: "old" ([empty, seq, payload]) or "new" (with the
  topic frame: [empty, topic, seq, payload]).

Payloads are either the exact bytes of testdata/kv-events/vectors.json
or batches encoded by msgspec from event structs declared here with the
options docs/kv-event-formats.md (section 1.4) gives for vLLM: the batch
is array-like; events are tagged, omit defaults, and are array-like in the
"array" generation and maps in the "map" generation.

Driven over stdin/stdout, one JSON object per line, so a Go test can run it
as a subprocess:

  in:  {"cmd": "wait_sub"}                       wait until a subscriber is connected
       {"cmd": "vectors", "names": [...]}        publish vectors by name, in order
       {"cmd": "emit", "gen": "array"|"map", "n": N, "first": H, "tokens_from": T}
                                                 publish N one-block BlockStored batches
       {"cmd": "skip", "n": N, ...emit args}     buffer N batches for replay without sending them
       {"cmd": "forget_before", "seq": S}        drop buffered batches with seq < S
       {"cmd": "quit"}
  out: {"ready": true, "pub": ..., "replay": ...} once, then {"ok": cmd, "seq": next_seq} per command.
"""
import argparse
import json
import pathlib
import queue
import sys
import threading
import time
from typing import Optional, Union

import msgspec
import zmq

END_SEQ = (2**64 - 1).to_bytes(8, "big")


class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list
    data_parallel_rank: Optional[int] = None


def event_structs(array_like):
    """Declares the three event structs of one generation (array or map)."""

    class KVCacheEvent(msgspec.Struct, array_like=array_like, omit_defaults=True, gc=False, tag=True):
        pass

    class BlockStored(KVCacheEvent):
        block_hashes: list
        parent_block_hash: Union[int, bytes, None]
        token_ids: list
        block_size: int
        lora_id: Optional[int]
        medium: Optional[str]
        lora_name: Optional[str]
        extra_keys: Optional[list] = None
        group_idx: Optional[int] = None
        kv_cache_spec_kind: Optional[str] = None
        kv_cache_spec_sliding_window: Optional[int] = None

    class BlockRemoved(KVCacheEvent):
        block_hashes: list
        medium: Optional[str]
        group_idx: Optional[int] = None

    class AllBlocksCleared(KVCacheEvent):
        pass

    return BlockStored, BlockRemoved, AllBlocksCleared


GENERATIONS = {"array": event_structs(True), "map": event_structs(False)}
ENCODER = msgspec.msgpack.Encoder()


def stored_batch(gen, ts, block_hash, parent, tokens, rank=0):
    BlockStored, _, _ = GENERATIONS[gen]
    ev = BlockStored(
        block_hashes=[block_hash], parent_block_hash=parent, token_ids=tokens, block_size=len(tokens),
        lora_id=None, medium="GPU", lora_name=None, extra_keys=[None], group_idx=0,
        kv_cache_spec_kind="full_attention",
    )
    return ENCODER.encode(EventBatch(ts=ts, events=[ev], data_parallel_rank=rank))


def load_vectors(path):
    data = json.loads(pathlib.Path(path).read_text())
    return {k: bytes.fromhex(v["hex"]) for k, v in data["msgpack"].items()}


class Publisher:
    def __init__(self, args):
        self.ctx = zmq.Context()
        self.topic = args.topic.encode()
        self.reply_gen = args.reply_gen
        self.pub = self.ctx.socket(zmq.PUB)
        self.pub.setsockopt(zmq.SNDHWM, args.hwm)
        self.pub.setsockopt(zmq.LINGER, 0)
        self.monitor = self.pub.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
        if args.connect:
            self.pub.connect(args.connect)
            self.pub_addr = args.connect
        else:
            self.pub.bind(args.bind)
            self.pub_addr = self.pub.getsockopt(zmq.LAST_ENDPOINT).decode()
        self.router = None
        self.replay_addr = ""
        if args.replay:
            self.router = self.ctx.socket(zmq.ROUTER)
            self.router.setsockopt(zmq.LINGER, 0)
            self.router.bind(args.replay)
            self.replay_addr = self.router.getsockopt(zmq.LAST_ENDPOINT).decode()
        self.seq = args.first_seq
        self.buffer = []  # (seq, payload), like the engine's deque
        self.vectors = load_vectors(args.vectors) if args.vectors else {}
        self.subscribed = False

    def send(self, payload, live=True):
        seq = self.seq
        self.seq += 1
        if live:
            self.pub.send_multipart([self.topic, seq.to_bytes(8, "big"), payload])
        self.buffer.append((seq, payload))

    def serve_replay(self):
        while self.router is not None and self.router.poll(0):
            frames = self.router.recv_multipart()
            if len(frames) != 3:
                continue  # the engines ignore malformed requests too
            ident, _, start = frames
            start_seq = int.from_bytes(start, "big")
            for seq, payload in self.buffer:
                if seq >= start_seq:
                    self.reply(ident, seq.to_bytes(8, "big"), payload)
            self.reply(ident, END_SEQ, b"")

    def reply(self, ident, seq_frame, payload):
        if self.reply_gen == "new":
            self.router.send_multipart([ident, b"", self.topic, seq_frame, payload])
        else:
            self.router.send_multipart([ident, b"", seq_frame, payload])

    def wait_sub(self, timeout=20.0):
        deadline = time.time() + timeout
        while not self.subscribed and time.time() < deadline:
            if self.monitor.poll(50):
                self.monitor.recv_multipart()
                self.subscribed = True
            self.serve_replay()
        # The SUBSCRIBE follows the handshake; give it a moment to land.
        end = time.time() + 0.3
        while time.time() < end:
            self.serve_replay()
            time.sleep(0.01)
        return self.subscribed

    def emit_payloads(self, cmd):
        gen = cmd.get("gen", "array")
        first = cmd.get("first", 1000)
        tfrom = cmd.get("tokens_from", 1)
        bs = cmd.get("block_size", 16)
        for i in range(cmd.get("n", 1)):
            h = first + i
            parent = None if i == 0 and cmd.get("root", True) else h - 1
            toks = list(range(tfrom + i * bs, tfrom + (i + 1) * bs))
            yield stored_batch(gen, 1757500000.0 + h / 1000.0, h, parent, toks, cmd.get("rank", 0))

    def handle(self, cmd):
        c = cmd["cmd"]
        if c == "wait_sub":
            return {"ok": c, "subscribed": self.wait_sub(), "seq": self.seq}
        if c == "vectors":
            for name in cmd["names"]:
                self.send(self.vectors[name])
        elif c == "emit":
            for p in self.emit_payloads(cmd):
                self.send(p)
        elif c == "skip":
            for p in self.emit_payloads(cmd):
                self.send(p, live=False)
        elif c == "forget_before":
            self.buffer = [(s, p) for s, p in self.buffer if s >= cmd["seq"]]
        elif c == "quit":
            return None
        return {"ok": c, "seq": self.seq}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bind", default="tcp://127.0.0.1:*")
    ap.add_argument("--connect", default="")
    ap.add_argument("--replay", default="")
    ap.add_argument("--topic", default="")
    ap.add_argument("--reply-gen", choices=["old", "new"], default="new")
    ap.add_argument("--hwm", type=int, default=100000)
    ap.add_argument("--first-seq", type=int, default=0)
    ap.add_argument("--vectors", default="")
    args = ap.parse_args()
    p = Publisher(args)
    cmds = queue.Queue()

    def read_stdin():
        for line in sys.stdin:
            if line.strip():
                cmds.put(json.loads(line))
        cmds.put({"cmd": "quit"})

    threading.Thread(target=read_stdin, daemon=True).start()
    print(json.dumps({"ready": True, "pub": p.pub_addr, "replay": p.replay_addr}), flush=True)
    while True:
        p.serve_replay()
        try:
            cmd = cmds.get(timeout=0.01)
        except queue.Empty:
            continue
        out = p.handle(cmd)
        if out is None:
            break
        print(json.dumps(out), flush=True)
    p.pub.disable_monitor()
    p.monitor.close(0)
    p.pub.close(0)
    if p.router is not None:
        p.router.close(0)
    p.ctx.term()


if __name__ == "__main__":
    main()
