"""Runs the analytics example (replay/analytics/ttft_itl_by_mode.sql) with
the real DuckDB on files `pdrouter export` wrote, and checks its numbers
against a plain-Python computation from the JSON lines of the same export.
"""
import collections
import json
import math
import pathlib
import statistics
import subprocess

import duckdb
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SQL = ROOT / "replay" / "analytics" / "ttft_itl_by_mode.sql"


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory, exportfixture_bin):
    out = tmp_path_factory.mktemp("analytics")
    subprocess.run([exportfixture_bin, "-dir", str(out), "-n", "160"],
                   check=True, timeout=600)
    return out


def rows(path):
    with open(path) as f:
        return [json.loads(l) for l in f]


def bucket(eff):
    return 0 if eff == 0 else 2 ** int(math.floor(math.log2(eff)))


def expected(export_dir):
    decisions = {d["request_id"]: d for d in rows(export_dir / "decisions.jsonl")}
    by_req = collections.defaultdict(list)
    for o in rows(export_dir / "outcomes.jsonl"):
        by_req[o["request_id"]].append(o)
    groups = collections.defaultdict(lambda: ([], []))
    for rid, evs in by_req.items():
        d = decisions.get(rid)
        terminal = sorted((e for e in evs if e["kind"] in ("completed", "cancelled")), key=lambda e: e["event_time"])
        if d is None or not terminal:
            continue
        ttfts = [e["ttft_ms"] for e in evs if e.get("ttft_ms") is not None]
        key = (d["mode"], d["reason"], bucket(int(d["effective_isl"])))
        if ttfts:
            groups[key][0].append(min(ttfts))
        if terminal[0].get("itl_ms_mean") is not None:
            groups[key][1].append(terminal[0]["itl_ms_mean"])
    return groups


def test_duckdb_example_matches_a_direct_computation(export_dir):
    con = duckdb.connect()
    con.execute(f"SET VARIABLE decisions = '{export_dir / 'decisions.parquet'}'")
    con.execute(f"SET VARIABLE outcomes = '{export_dir / 'outcomes.parquet'}'")
    got = con.execute(SQL.read_text()).fetchall()
    cols = [c[0] for c in con.description]
    want = expected(export_dir)
    assert len(got) == len(want) and len(got) >= 2, (got, dict(want))
    modes = set()
    for r in got:
        r = dict(zip(cols, r))
        modes.add(r["mode"])
        ttft, itl = want[(r["mode"], r["reason"], r["eff_isl_bucket"])]
        assert r["requests"] == max(len(ttft), len(itl))
        if ttft:
            assert r["ttft_ms_mean"] == pytest.approx(statistics.fmean(ttft), abs=1e-3)
            assert r["ttft_ms_p50"] == pytest.approx(statistics.median(ttft), abs=1e-3)
        if itl:
            assert r["itl_ms_mean"] == pytest.approx(statistics.fmean(itl), abs=1e-3)
    assert modes == {"local", "remote"}, modes
