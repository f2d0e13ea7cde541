package events

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Cells: partition ownership.
//
// A replica group applies every record of its topics, so every replica
// pays for every worker's KV events and every peer's decisions
// (docs/scaling.md). A cell is the share of the log one group applies
// instead: cell i of n holds the partitions p with p mod n = i, of every
// topic. Every record about a worker is keyed by the worker's id
// (WorkerKey), and Kafka's default partitioner (murmur2 of the key, modulo
// the partition count; franz-go's default too) puts it in partition
// murmur2(id) mod P. When n divides every topic's P, that partition's cell
// is murmur2(id) mod n whatever the topic: a worker's registration, KV
// events, load samples, and the decisions and outcomes keyed by it as the
// decode worker, all fall in one cell, chosen by the key alone. So a
// cell's replicas see whole workers, decide among them, and their own
// decisions land back in their cell; the state of a cell is the state of
// its partitions, and replaying those partitions rebuilds it.
//
// The invariant this rests on: n divides the partition count of every
// topic (CheckPartitionCount). The topics' defaults (16, 8, 4, 16, 16)
// allow 1, 2 and 4 cells.

// MaxCells bounds the cell count: no more than the most partitions a topic
// may be declared with (migrations).
const MaxCells = 10000

// Cell names the share of the log a replica applies. The zero value, like
// any Count ≤ 1, is the whole log.
type Cell struct {
	Index int32
	Count int32
}

// Whole reports whether c is the whole log.
func (c Cell) Whole() bool { return c.Count <= 1 }

func (c Cell) String() string {
	if c.Whole() {
		return "0/1"
	}
	return strconv.Itoa(int(c.Index)) + "/" + strconv.Itoa(int(c.Count))
}

// ParseCell reads "i/n": cell i of n, 0 ≤ i < n ≤ MaxCells. "0/1" is the
// whole log.
func ParseCell(s string) (Cell, error) {
	is, ns, ok := strings.Cut(s, "/")
	i, err1 := strconv.ParseInt(is, 10, 32)
	n, err2 := strconv.ParseInt(ns, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return Cell{}, fmt.Errorf("cell %q: want i/n, e.g. 0/4 (cell 0 of 4)", s)
	}
	if n < 1 || n > MaxCells || i < 0 || i >= n {
		return Cell{}, fmt.Errorf("cell %q: want 0 ≤ i < n ≤ %d", s, MaxCells)
	}
	return Cell{Index: int32(i), Count: int32(n)}, nil
}

// OwnsPartition reports whether partition p of any topic is in c.
func (c Cell) OwnsPartition(p int32) bool {
	return c.Whole() || (p >= 0 && p%c.Count == c.Index)
}

// OwnsKey reports whether the default partitioner puts a record keyed key
// in c, for any topic whose partition count c.Count divides.
func (c Cell) OwnsKey(key []byte) bool {
	return c.Whole() || KeyPartition(key, c.Count) == c.Index
}

// OwnsWorker reports whether worker id's records are in c.
func (c Cell) OwnsWorker(id string) bool { return c.OwnsKey(WorkerKey(id)) }

// CellOfWorker returns the cell of n that holds worker id's records.
func CellOfWorker(id string, n int32) Cell {
	if n <= 1 {
		return Cell{}
	}
	return Cell{Index: KeyPartition(WorkerKey(id), n), Count: n}
}

// ErrCellPartitions is matched by the error of a topic whose partition
// count the cell count does not divide.
var ErrCellPartitions = errors.New("partition count not a multiple of the cell count")

// CheckPartitionCounts returns an error matching ErrCellPartitions unless
// c can own whole workers of topics with these partition counts: c.Count
// must divide every one. The error names the first topic that breaks it
// and the cell counts the topics allow (the divisors of their counts'
// greatest common divisor).
func (c Cell) CheckPartitionCounts(topics []string, counts []int) error {
	if c.Whole() {
		return nil
	}
	g := 0
	for _, n := range counts {
		g = gcd(g, n)
	}
	for i, n := range counts {
		if n > 0 && n%int(c.Count) == 0 {
			continue
		}
		return fmt.Errorf("%w: cell %s: topic %s has %d partitions, not a multiple of %d, so one worker's records would fall in different cells; these topics allow a cell count that divides %d, or recreate them with multiples of %d partitions",
			ErrCellPartitions, c, topics[i], n, c.Count, g, c.Count)
	}
	return nil
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// KeyPartition is the partition, of n, that Kafka's default partitioner
// gives a record keyed key: the positive part of murmur2 (Kafka's variant,
// seed 0x9747b28c) modulo n. Java's default partitioner and franz-go's
// (pdrouter's writers) agree on it, as do librdkafka producers set to
// partitioner=murmur2_random; librdkafka's own default (CRC32) does not.
func KeyPartition(key []byte, n int32) int32 {
	if n <= 1 {
		return 0
	}
	return int32(murmur2(key)&0x7fffffff) % n
}

// murmur2 is Kafka's 32-bit MurmurHash2 (Utils.murmur2).
func murmur2(b []byte) uint32 {
	const (
		seed = 0x9747b28c
		m    = 0x5bd1e995
		r    = 24
	)
	h := uint32(seed) ^ uint32(len(b))
	for ; len(b) >= 4; b = b[4:] {
		k := binary.LittleEndian.Uint32(b)
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	switch len(b) {
	case 3:
		h ^= uint32(b[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(b[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(b[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}

// WriterPartition is the partition, of n, of load-deltas that a replica of
// cell c in a group sharing load shares (statestore.SourceLoadShares)
// writes its own load deltas to, and the only one it reads back, and the
// partition of load-shares its snapshots go to. On the whole log it is the
// partition Kafka's default partitioner gives a record keyed by the
// writer's replica id. In a cell it is one of the cell's partitions,
// chosen by the same hash among them, since a replica reads its cell's
// partitions alone: its own deltas, and its cell's writers' snapshots,
// must be there. It needs c.Count to divide n (CheckPartitionCounts). The
// records keep their keys (a delta its decode worker's, a snapshot the
// writer's), which their rules read.
func WriterPartition(writer string, n int32, c Cell) int32 {
	if c.Whole() {
		return KeyPartition([]byte(writer), n)
	}
	return KeyPartition([]byte(writer), n/c.Count)*c.Count + c.Index
}
