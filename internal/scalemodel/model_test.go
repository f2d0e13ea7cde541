package scalemodel

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// The figures of the issue: a = 269 µs, p = 143 µs on 2-core replicas
// top out near 11k decisions/s however many replicas run, and a = 150 µs
// needs p ≤ ~14 µs for an efficiency of 0.6 at 8 replicas.
func TestModelFigures(t *testing.T) {
	old := Model{AnsweredUS: 269, AppliedUS: 143}
	if c := old.Capacity(16, 2); c < 10_500 || c > 14_000 || old.Capacity(1000, 2) > 2e6/143 {
		t.Errorf("capacity of 16 old replicas %.0f/s, of 1,000 %.0f/s: want about 11k and at most C/p", c, old.Capacity(1000, 2))
	}
	if c1 := old.Capacity(1, 2); math.Abs(c1-2e6/269) > 1e-6 {
		t.Errorf("one replica: %.1f/s, want C/a", c1)
	}
	target := Model{AnsweredUS: 150, AppliedUS: 14}
	if e := target.Efficiency(8); e < 0.6 || e > 0.61 {
		t.Errorf("efficiency at 8 with a=150, p=14: %.3f, want just over 0.6", e)
	}
	for _, n := range Sizes {
		if got, want := target.Capacity(n, 2), float64(n)*target.Capacity(1, 2)*target.Efficiency(n); math.Abs(got-want) > 1e-6 {
			t.Errorf("n=%d: capacity %.3f is not n·R(1)·efficiency %.3f", n, got, want)
		}
	}
	if got := target.ReplicaCPU(100, 300); math.Abs(got-(100*150+200*14)/1e6) > 1e-12 {
		t.Errorf("replica CPU %.6f", got)
	}
	if (Model{}).Capacity(4, 2) != 0 || (Model{}).Efficiency(4) != 0 {
		t.Error("a zero model must give zeros, not infinities")
	}
}

// The JSON is exactly the documented object, keys in order.
func TestModelJSON(t *testing.T) {
	s := Model{AnsweredUS: 150, AppliedUS: 15}.JSON(2)
	want := `{"cpu_us_per_answered": 150.0, "cpu_us_per_applied": 15.0, "capacity": {"1": 13333, "2": 24242, "4": 41026, "8": 62745, "16": 85333}, "efficiency": {"1": 1.000, "2": 0.909, "4": 0.769, "8": 0.588, "16": 0.400}, ` +
		`"cells": {"2": {"capacity": {"2": 26667, "4": 48485, "8": 82051, "16": 125490}, "efficiency": {"2": 1.000, "4": 0.909, "8": 0.769, "16": 0.588}}, ` +
		`"4": {"capacity": {"4": 53333, "8": 96970, "16": 164103}, "efficiency": {"4": 1.000, "8": 0.909, "16": 0.769}}}}`
	if s != want {
		t.Fatalf("got  %s\nwant %s", s, want)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(s), &v); err != nil || len(v) != 5 || strings.Contains(s, "\n") {
		t.Fatalf("not one JSON object of five keys: %v", err)
	}
}

// n replicas in k cells cost what n/k replicas of one group do, k times
// over: each cell's efficiency is the whole log's at its own size.
func TestCellsModel(t *testing.T) {
	m := Model{AnsweredUS: 353.5, AppliedUS: 77.2}
	for _, k := range []int{1, 2, 4} {
		for _, n := range []int{4, 8, 16} {
			if got, want := m.CellEfficiency(n, k), m.Efficiency(n/k); math.Abs(got-want) > 1e-12 {
				t.Errorf("%d replicas in %d cells: efficiency %.4f, want %.4f", n, k, got, want)
			}
			if got, want := m.CellCapacity(n, k, 2), float64(k)*m.Capacity(n/k, 2); math.Abs(got-want) > 1e-6 {
				t.Errorf("%d replicas in %d cells: capacity %.1f, want %.1f", n, k, got, want)
			}
		}
	}
	if e := m.CellEfficiency(8, 4); e < 0.82 || e > 0.83 {
		t.Errorf("8 replicas in 4 cells at a = 353.5, p = 77.2: efficiency %.3f, want a/(a+p) = 0.821", e)
	}
	for _, c := range [][2]int{{1, 2}, {6, 4}, {8, 0}} {
		if m.CellCapacity(c[0], c[1], 2) != 0 || m.CellEfficiency(c[0], c[1]) != 0 {
			t.Errorf("%d replicas do not split into %d cells: want 0", c[0], c[1])
		}
	}
}
