"""The ingest test publisher's msgspec structs reproduce vectors.json byte for byte.

This is the cross-check the vectors lacked: they came from an independent
encoder, and here msgspec itself (the library vLLM encodes with), with the
struct options kv-event-formats.md gives for vLLM, yields the same bytes.
So the Go decoder tests, which read the vectors, are tests against what
msgspec emits.
"""
import json
import pathlib
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import zmq_kv_publisher as z  # noqa: E402

VECTORS = HERE.parents[1] / "testdata" / "kv-events" / "vectors.json"
hA = 3236607068019569386
hB = 2758186210834249151
T1 = list(range(1, 17))
T2 = list(range(17, 33))
DIGEST1 = bytes.fromhex(json.loads(VECTORS.read_text())["block1_sha256"])


def batch(gen, ts, make):
    S, R, C = z.GENERATIONS[gen]
    return z.ENCODER.encode(z.EventBatch(ts=ts, events=make(S, R, C), data_parallel_rank=0))


def stored(S, h, parent, toks):
    return S(block_hashes=[h], parent_block_hash=parent, token_ids=toks, block_size=16, lora_id=None,
             medium="GPU", lora_name=None, extra_keys=[None], group_idx=0, kv_cache_spec_kind="full_attention")


def offload(S, R, C):
    # vLLM's OffloadingConnector (CPU backend) names the blocks it copied off the GPU by
    # their GPU hashes, with no tokens and no parent, and passes only these fields.
    return [S(block_hashes=[hA, hB], parent_block_hash=None, token_ids=T1 + T2, block_size=16, lora_id=None,
              medium="GPU", lora_name=None, extra_keys=[None, None], group_idx=0, kv_cache_spec_kind="full_attention"),
            S(block_hashes=[hA, hB, 0xff01], parent_block_hash=None, token_ids=[], lora_id=None, block_size=16,
              medium="CPU", lora_name=None),
            R(block_hashes=[hB], medium="GPU", group_idx=0)]


CASES = {
    "positional_BlockStored_batch": ("array", 1757500000.25, lambda S, R, C: [stored(S, hA, None, T1)]),
    "positional_BlockRemoved_batch": ("array", 1757500001.5, lambda S, R, C: [R(block_hashes=[hA, hB], medium="GPU", group_idx=0)]),
    "positional_AllBlocksCleared_batch": ("array", 1757500002.0, lambda S, R, C: [C()]),
    "map_BlockStored_batch": ("map", 1757500000.25, lambda S, R, C: [stored(S, hA, None, T1)]),
    "map_BlockStored_child_batch": ("map", 1757500000.5, lambda S, R, C: [stored(S, hB, hA, T2)]),
    "map_BlockRemoved_batch": ("map", 1757500001.5, lambda S, R, C: [R(block_hashes=[hB, hA], medium="GPU", group_idx=0)]),
    "map_AllBlocksCleared_batch": ("map", 1757500002.0, lambda S, R, C: [C()]),
    "map_BlockRemoved_bytes_hash_batch": ("map", 1757500003.0, lambda S, R, C: [R(block_hashes=[DIGEST1], medium="GPU", group_idx=0)]),
    "positional_offload_CPU_batch": ("array", 1757500004.0, offload),
    "map_offload_CPU_batch": ("map", 1757500004.0, offload),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_msgspec_reproduces_vector(name):
    gen, ts, make = CASES[name]
    want = z.load_vectors(VECTORS)[name]
    got = batch(gen, ts, make)
    assert got.hex() == want.hex()


def test_v09_shape_with_msgspec():
    # v0.9: 2-element batch (no rank field yet), 6-field BlockStored, 2-field BlockRemoved.
    import msgspec

    class Batch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
        ts: float
        events: list

    class Ev(msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True):
        pass

    class BlockStored(Ev):
        block_hashes: list
        parent_block_hash: object
        token_ids: list
        block_size: int
        lora_id: object

    class BlockRemoved(Ev):
        block_hashes: list

    got = z.ENCODER.encode(Batch(ts=1757500000.25, events=[BlockStored([hA], None, T1, 16, None), BlockRemoved([hA])]))
    assert got == z.load_vectors(VECTORS)["v0.9_positional_2elem_batch"]
