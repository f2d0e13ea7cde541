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

// Cells are the cell counts the bench models besides the whole log.
var Cells = []int{2, 4}

// Capacity is the most decisions per second a group of n replicas of
// cores cores each answers at full CPU use.
func (m Model) Capacity(n int, cores float64) float64 { return m.CellCapacity(n, 1, cores) }

// Efficiency is Capacity(n) / (n · Capacity(1)).
func (m Model) Efficiency(n int) float64 { return m.CellEfficiency(n, 1) }

// CellCapacity is the capacity of n replicas split evenly into cells
// (events.Cell), n/cells to a cell: a replica applies only its own cell's
// decisions, so a decision costs a + (n/cells − 1)·p, and a fleet of
// cells answers cells times what one cell does, as long as its load
// spreads evenly over them (the gateway's job). n must be a multiple of
// cells; 0 otherwise.
func (m Model) CellCapacity(n, cells int, cores float64) float64 {
	per := m.perDecision(n, cells)
	if per <= 0 {
		return 0
	}
	return float64(n) * cores * 1e6 / per
}

// CellEfficiency is CellCapacity(n, cells) / (n · Capacity(1)).
func (m Model) CellEfficiency(n, cells int) float64 {
	per := m.perDecision(n, cells)
	if per <= 0 {
		return 0
	}
	return m.AnsweredUS / per
}

// perDecision is the CPU µs a decision costs its cell; 0 when n replicas
// do not split evenly into cells.
func (m Model) perDecision(n, cells int) float64 {
	if cells < 1 || n < cells || n%cells != 0 {
		return 0
	}
	return m.AnsweredUS + float64(n/cells-1)*m.AppliedUS
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
//	 "capacity": {"1": …, …, "16": …}, "efficiency": {"1": …, …, "16": …},
//	 "cells": {"2": {"capacity": {"2": …, …}, "efficiency": {…}}, "4": {…}}}
//
// Capacity is in decisions per second (rounded), efficiency a fraction
// (three decimals). "cells" holds, per cell count of Cells, the sizes of
// Sizes that split evenly into that many cells.
func (m Model) JSON(cores float64) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"cpu_us_per_answered": %s, "cpu_us_per_applied": %s, `,
		strconv.FormatFloat(m.AnsweredUS, 'f', 1, 64), strconv.FormatFloat(m.AppliedUS, 'f', 1, 64))
	m.appendCell(&b, 1, cores)
	b.WriteString(`, "cells": {`)
	for i, k := range Cells {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, `"%d": {`, k)
		m.appendCell(&b, k, cores)
		b.WriteString("}")
	}
	b.WriteString("}}")
	return b.String()
}

// appendCell writes `"capacity": {…}, "efficiency": {…}` for the sizes of
// Sizes that split into cells.
func (m Model) appendCell(b *strings.Builder, cells int, cores float64) {
	for j, key := range []string{"capacity", "efficiency"} {
		if j > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(b, `"%s": {`, key)
		first := true
		for _, n := range Sizes {
			if m.perDecision(n, cells) == 0 {
				continue
			}
			if !first {
				b.WriteString(", ")
			}
			first = false
			if key == "capacity" {
				fmt.Fprintf(b, `"%d": %s`, n, strconv.FormatFloat(m.CellCapacity(n, cells, cores), 'f', 0, 64))
			} else {
				fmt.Fprintf(b, `"%d": %s`, n, strconv.FormatFloat(m.CellEfficiency(n, cells), 'f', 3, 64))
			}
		}
		b.WriteString("}")
	}
}
