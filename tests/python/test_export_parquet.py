"""Checks that `pdrouter export` files read correctly outside Go.

replay/internal/exportfixture runs the real export path (generated decisions
and outcomes written to an in-process broker, then `export decisions
--join-outcomes` and `export outcomes`, in Parquet and in JSON lines). Here
pyarrow, an independent Parquet implementation, reads the Parquet files and
must find the documented schema (replay/EXPORT.md) and exactly the values of
the JSON lines, row for row.
"""
import datetime
import json
import math
import subprocess

import pyarrow as pa
import pyarrow.parquet as pq
import pytest


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory, exportfixture_bin):
    out = tmp_path_factory.mktemp("export")
    subprocess.run(
        [exportfixture_bin, "-dir", str(out), "-n", "120"],
        check=True, timeout=600,
    )
    return out


def jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def as_json_value(v):
    """Renders a pyarrow Python value as the JSON lines file writes it."""
    if isinstance(v, datetime.datetime):
        return v
    if isinstance(v, list):
        return [as_json_value(x) for x in v]
    if isinstance(v, dict):
        return {k: as_json_value(x) for k, x in v.items()}
    return v


def parse_time(s):
    # RFC 3339 with up to nanoseconds; Python keeps microseconds.
    s = s.replace("Z", "+00:00")
    if "." in s:
        head, rest = s.split(".", 1)
        frac, tz = rest[:-6], rest[-6:]
        s = f"{head}.{frac[:6].ljust(6, '0')}{tz}"
    return datetime.datetime.fromisoformat(s)


def same(a, b, path=""):
    if isinstance(b, str) and isinstance(a, datetime.datetime):
        assert a == parse_time(b), path
    elif isinstance(a, float) or isinstance(b, float):
        assert math.isclose(a, b, rel_tol=0, abs_tol=0) or a == b, f"{path}: {a} != {b}"
    elif isinstance(a, dict):
        assert set(a) == set(b), f"{path}: {sorted(set(a) ^ set(b))}"
        for k in a:
            same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{path}[{i}]")
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def test_decisions_parquet_schema(export_dir):
    f = pq.ParquetFile(export_dir / "decisions.parquet")
    meta = f.schema_arrow.metadata or {}
    assert meta.get(b"pdrouter.export.schema_version") == b"1"
    s = f.schema_arrow
    assert s.field("schema_version").type == pa.int32()
    assert s.field("decided_at").type == pa.timestamp("ns", tz="UTC")
    assert s.field("prefill_worker").nullable
    assert s.field("ttft_ms").type == pa.float64()
    cands = s.field("candidates").type
    assert pa.types.is_list(cands)
    item = cands.value_type
    assert pa.types.is_struct(item)
    names = {item.field(i).name for i in range(item.num_fields)}
    assert {"worker", "pool", "overlap_blocks", "active_decode_blocks", "cost", "picked", "tie_hash"} <= names


def test_decisions_parquet_equals_jsonl(export_dir):
    table = pq.read_table(export_dir / "decisions.parquet")
    rows = sorted(table.to_pylist(), key=lambda r: r["decision_id"])
    lines = sorted(jsonl(export_dir / "decisions.jsonl"), key=lambda r: r["decision_id"])
    assert len(rows) == len(lines) == 120
    for r, l in zip(rows, lines):
        same(as_json_value(r), l, r["decision_id"])
        assert r["schema_version"] == 1
        # One decode worker is picked in every decision.
        assert sum(c["picked"] for c in r["candidates"] if c["pool"] == "decode") == 1
        assert (r["prefill_worker"] is None) == (r["mode"] == "local")
    joined = [r for r in rows if r["outcome"] is not None]
    assert len(joined) == 60
    assert {r["outcome"] for r in joined} == {"completed", "cancelled"}
    for r in joined:
        assert r["finished_at"] > r["decided_at"]
        assert r["ttft_ms"] is not None and r["output_tokens"] >= 100


def test_outcomes_parquet_equals_jsonl(export_dir):
    rows = sorted(pq.read_table(export_dir / "outcomes.parquet").to_pylist(), key=lambda r: (r["request_id"], r["kind"]))
    lines = sorted(jsonl(export_dir / "outcomes.jsonl"), key=lambda r: (r["request_id"], r["kind"]))
    assert len(rows) == len(lines) == 120
    for r, l in zip(rows, lines):
        same(as_json_value(r), l, r["request_id"])
