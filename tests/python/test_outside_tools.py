"""Checks that tools outside pdrouter's Go code can read what it writes.

* The golden records in events/testdata/golden/v1 decode with the stock
  Python protobuf runtime, from the checked-in .proto files alone.
* The router hash chain (kvhash) matches an independent XXH3 implementation
  (python-xxhash, a binding of the reference C library).
"""
import json
import pathlib
import struct
import subprocess
import sys

import pytest
import xxhash
from google.protobuf import json_format

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROTO = ROOT / "events" / "proto"
GOLDEN = ROOT / "events" / "testdata" / "golden" / "v1"

MESSAGE = {
    "kv-events": "KvEventRecord",
    "load": "LoadSample",
    "workers": "WorkerRegistration",
    "decisions": "DecisionRecord",
    "outcomes": "OutcomeEvent",
    "load-deltas": "LoadDelta",
    "load-shares": "LoadShares",
    "forwards": "ForwardedEvent",
}


@pytest.fixture(scope="session")
def pb(tmp_path_factory):
    out = tmp_path_factory.mktemp("pb")
    protos = sorted(str(p) for p in (PROTO / "pdrouter" / "events" / "v1").glob("*.proto"))
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{PROTO}", f"--python_out={out}", *protos],
        check=True,
    )
    sys.path.insert(0, str(out))
    import importlib

    mods = {}
    for name in ["common", "kv_events", "load", "workers", "decisions", "outcomes", "health", "load_deltas", "load_shares", "forwards"]:
        mods[name] = importlib.import_module(f"pdrouter.events.v1.{name}_pb2")
    return mods


def message_class(pb, topic):
    name = MESSAGE[topic]
    for mod in pb.values():
        if hasattr(mod, name):
            return getattr(mod, name)
    raise AssertionError(f"no message {name}")


@pytest.mark.parametrize("topic", sorted(MESSAGE))
def test_golden_record_decodes_in_python(pb, topic):
    cls = message_class(pb, topic)
    got = cls()
    got.ParseFromString((GOLDEN / f"{topic}.binpb").read_bytes())
    want = json_format.Parse((GOLDEN / f"{topic}.json").read_text(), cls())
    assert got == want
    # The full name is what the pdr-schema header carries.
    assert cls.DESCRIPTOR.full_name == f"pdrouter.events.v1.{MESSAGE[topic]}"
    # A field a later version might add is kept, not a decode failure.
    assert got.ByteSize() > 0


def test_side_golden_record_decodes_in_python(pb):
    # load.WorkerHealth: a message the load topic carries next to LoadSample,
    # under its own pdr-schema header.
    cls = pb["health"].WorkerHealth
    got = cls()
    got.ParseFromString((GOLDEN / "load.WorkerHealth.binpb").read_bytes())
    want = json_format.Parse((GOLDEN / "load.WorkerHealth.json").read_text(), cls())
    assert got == want
    assert cls.DESCRIPTOR.full_name == "pdrouter.events.v1.WorkerHealth"
    assert got.reason == pb["health"].HEALTH_REASON_SCRAPE_FAILED and not got.healthy


def test_unknown_fields_survive_python_round_trip(pb):
    cls = message_class(pb, "load")
    raw = (GOLDEN / "load.binpb").read_bytes() + bytes([0xF8, 0x06, 0x2A])  # field 111 = 42
    m = cls()
    m.ParseFromString(raw)
    assert m.SerializeToString() == raw


def chain(tokens, block_size):
    out, parent = [], None
    for off in range(0, len(tokens) - block_size + 1, block_size):
        local = xxhash.xxh3_64_intdigest(struct.pack(f"<{block_size}I", *tokens[off : off + block_size]), seed=1337)
        h = local if parent is None else xxhash.xxh3_64_intdigest(struct.pack("<QQ", parent, local), seed=1337)
        out.append(h)
        parent = h
    return out


def test_router_hash_chain_matches_reference_xxh3():
    vectors = json.loads((ROOT / "kvhash" / "testdata" / "chains.json").read_text())
    assert len(vectors) >= 3
    for v in vectors:
        got = chain(v["tokens"], v["block_size"])
        assert [f"{h:016x}" for h in got] == v["chain"], v["name"]
