// Package scalemodel is the CPU model of a group of router replicas, the
// one docs/scaling.md sizes fleets with and `pdrouter bench scale`
// measures.
//
// Every replica applies every decision of its group, so a decision costs
// the group a (CPU on the replica that answered it, which also applies it
// back) plus p on each of the N−1 others (which apply it from the log).
// With the load spread evenly, each replica spends R/N·a + R·(N−1)/N·p
// CPU-seconds per second at a group rate of R decisions/s, so a group of N
// replicas of C cores each answers at most
//
//	R(N) = N·C / (a + (N−1)·p)
//
// and its scaling efficiency, R(N) over N times one replica's R(1), is
// a / (a + (N−1)·p). As N grows, R(N) tends to C/p: the applying half is
// why one replica group has a ceiling, and why a larger fleet shards.
package scalemodel

import (
	"fmt"
	"strconv"
	"strings"
)

// Sizes are the group sizes the bench reports.
var Sizes = []int{1, 2, 4, 8, 16}

// Model holds the two costs, in CPU microseconds per decision.
type Model struct {
	// AnsweredUS is a: CPU on the replica that answered a decision
	// (HTTP, hashing, decider, the durable append, applying it back, its
	// lifecycle event).
	AnsweredUS float64
	// AppliedUS is p: CPU on any other replica of the group, applying the
	// decision and its lifecycle event from the log.
	AppliedUS float64
}

// Capacity is the most decisions per second a group of n replicas of
// cores cores each answers at full CPU use.
func (m Model) Capacity(n int, cores float64) float64 {
	per := m.AnsweredUS + float64(n-1)*m.AppliedUS
	if per <= 0 {
		return 0
	}
	return float64(n) * cores * 1e6 / per
}

// Efficiency is Capacity(n) / (n · Capacity(1)).
func (m Model) Efficiency(n int) float64 {
	per := m.AnsweredUS + float64(n-1)*m.AppliedUS
	if per <= 0 {
		return 0
	}
	return m.AnsweredUS / per
}

// ReplicaCPU is the CPU seconds the model gives a replica that answered
// answered of a group's total decisions and applied the rest.
func (m Model) ReplicaCPU(answered, total int) float64 {
	return (float64(answered)*m.AnsweredUS + float64(total-answered)*m.AppliedUS) / 1e6
}

// JSON renders the model for n in Sizes as one JSON object, keys in this
// order:
//
//	{"cpu_us_per_answered": a, "cpu_us_per_applied": p,
//	 "capacity": {"1": …, …, "16": …}, "efficiency": {"1": …, …, "16": …}}
//
// Capacity is in decisions per second (rounded), efficiency a fraction
// (three decimals).
func (m Model) JSON(cores float64) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"cpu_us_per_answered": %s, "cpu_us_per_applied": %s, "capacity": {`,
		strconv.FormatFloat(m.AnsweredUS, 'f', 1, 64), strconv.FormatFloat(m.AppliedUS, 'f', 1, 64))
	for i, n := range Sizes {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, `"%d": %s`, n, strconv.FormatFloat(m.Capacity(n, cores), 'f', 0, 64))
	}
	b.WriteString(`}, "efficiency": {`)
	for i, n := range Sizes {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, `"%d": %s`, n, strconv.FormatFloat(m.Efficiency(n), 'f', 3, 64))
	}
	b.WriteString("}}")
	return b.String()
}
