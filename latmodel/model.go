package latmodel

import (
	"math"
	"slices"
	"time"

	"github.com/pdrouter/pdrouter/decider"
)

// Config shapes the model. The zero value of a field takes its default.
type Config struct {
	// BucketWidth is the event-time width of one bucket of sums (default 30 s).
	BucketWidth time.Duration
	// Buckets is the window: the sums of the last Buckets buckets (default 20, so
	// 10 minutes of event time at the default width).
	Buckets int
	// Skew is how long before its decision an outcome may be stamped and still join
	// (default 30 s): an outcome fact stays pending until its time + Skew leaves the
	// window.
	Skew time.Duration
	// MaxEntries bounds the join's entries (decisions and outcomes in the window,
	// default 500,000). Decisions whose ids are ULIDs are sampled within it, by a rule
	// that does not depend on arrival order (sample.go); the facts of other ids that
	// would exceed it are dropped and counted, the one case in which what the model
	// holds depends on arrival order.
	MaxEntries int
}

// Defaults.
const (
	DefaultBucketWidth = 30 * time.Second
	DefaultBuckets     = 20
	DefaultSkew        = 30 * time.Second
	DefaultMaxEntries  = 500_000
	// maxAccSamples bounds one accumulator: with features and targets ≤ 2^20, each
	// product is ≤ 2^40, and 2^22 of them sum to ≤ 2^62.
	maxAccSamples = 1 << 22
)

// targetScale is the fixed point of the targets: the sums hold latencies in units of
// 1/targetScale ms (100 µs), clamped at 2^20 units (104.8 s).
const targetScale = 10

func (c *Config) defaults() {
	if c.BucketWidth <= 0 {
		c.BucketWidth = DefaultBucketWidth
	}
	if c.Buckets <= 0 {
		c.Buckets = DefaultBuckets
	}
	if c.Skew < 0 {
		c.Skew = 0
	} else if c.Skew == 0 {
		c.Skew = DefaultSkew
	}
	if c.MaxEntries <= 0 {
		c.MaxEntries = DefaultMaxEntries
	}
}

const (
	fDecision = 1 << iota
	fTTFT
	fITL
)

// nTri is the number of distinct entries of the symmetric K×K matrix Σx·xᵀ.
const nTri = decider.LatencyK * (decider.LatencyK + 1) / 2

// acc is the sufficient statistics of one path and target in one bucket.
type acc struct {
	n  int64
	xx [nTri]int64
	xy [decider.LatencyK]int64
	yy int64
}

// bucket holds the accumulators of one event-time bucket.
type bucket struct {
	acc [decider.NumPaths][decider.NumTargets]acc
}

// entry is the join state of one decision id: the facts seen, each present while its
// bucket is in the window.
type entry struct {
	flags uint8
	path  decider.LatencyPath
	tD    int64
	x     [decider.LatencyK]int64
	tT    int64 // time and value (ttftUnit) of the TTFT fact
	ttft  int64
	tI    int64 // time and value (itlUnit) of the ITL fact
	itl   int64

	added uint8 // derived: which targets are in the sums
	// derived from the id: a ULID id's entry is in the sample of bucket u
	// (sample.go).
	sampled bool
	u       int64
}

// Stats counts what the model saw; the state exports them as metrics.
type Stats struct {
	Samples     int64 // samples added to the sums (a replaced sample counts again)
	Late        int64 // facts whose bucket had left the window on arrival
	NoDecision  int64 // outcomes naming no decision id: not joined
	Full        int64 // facts of ids that are not ULIDs dropped because MaxEntries was reached
	Sampled     int64 // facts of ULID ids outside their bucket's sample, and ids pushed out of it
	IDTime      int64 // facts stamped outside the bucket of their id's ULID (sample.go)
	AccFull     int64 // samples dropped because a bucket's accumulator was full
	Expired     int64 // entries whose facts all left the window
	Unjoined    int64 // of Expired: entries that never had both a decision and an outcome
	Entries     int   // entries held now
	Refits      int64
	WindowStart int64 // first bucket of the window
}

// Model is the online latency model. It is not safe for concurrent use: the state
// applies facts under its write lock and reads the fit (Fit) under its read lock.
type Model struct {
	cfg     Config
	width   int64
	cur     int64 // bucket of the clock; buckets ≤ cur − Buckets are out
	clocked bool
	entries map[string]*entry
	plain   int                  // entries of ids that are not ULIDs (not sampled)
	samples map[int64]*sampleSet // per bucket of a ULID id's time (sample.go)
	buckets map[int64]*bucket
	dirty   map[string]bool // entries changed since TakeDirty
	sumsDty bool
	fitDty  bool
	fit     *decider.LatencyFit
	stats   Stats
}

// New returns an empty model.
func New(cfg Config) *Model {
	cfg.defaults()
	return &Model{cfg: cfg, width: int64(cfg.BucketWidth), entries: map[string]*entry{},
		buckets: map[int64]*bucket{}, dirty: map[string]bool{}}
}

// Config returns the model's config with defaults filled in.
func (m *Model) Config() Config { return m.cfg }

// Stats returns the counters.
func (m *Model) Stats() Stats {
	s := m.stats
	s.Entries = len(m.entries)
	s.WindowStart = m.cur - int64(m.cfg.Buckets) + 1
	return s
}

func (m *Model) bucketOf(t int64) int64 {
	if t < 0 {
		return -1 - (-1-t)/m.width
	}
	return t / m.width
}

// inWindow reports whether event time t is in a bucket of the window.
func (m *Model) inWindow(t int64) bool {
	return !m.clocked || m.bucketOf(t) > m.cur-int64(m.cfg.Buckets)
}

// skewed is an outcome's time for presence: it stays as long as any decision it can
// join (stamped up to Skew after it) can.
func (m *Model) skewed(t int64) int64 {
	if t > math.MaxInt64-int64(m.cfg.Skew) {
		return math.MaxInt64
	}
	return t + int64(m.cfg.Skew)
}

// Advance moves the event-time clock to now (the max event time of decisions and
// outcomes; it never moves back). Buckets that leave the window go, with every fact
// stamped in them.
func (m *Model) Advance(now int64) {
	b := m.bucketOf(now)
	if m.clocked && b <= m.cur {
		return
	}
	m.cur, m.clocked = b, true
	m.sumsDty = true // the window's position is part of the sums' bytes
	edge := m.cur - int64(m.cfg.Buckets)
	for k := range m.buckets {
		if k <= edge {
			delete(m.buckets, k)
			m.sumsDty, m.fitDty = true, true
		}
	}
	// A sampled entry's facts leave only with its bucket's sample, whose ids
	// dropSamples prunes; the other entries are looked at one by one.
	m.dropSamples()
	if m.plain == 0 {
		return
	}
	for id, e := range m.entries {
		if !e.sampled && m.prune(e) {
			m.forgetIfEmpty(id, e)
		}
	}
}

// forgetIfEmpty marks a pruned entry dirty, and deletes it when no fact is left.
func (m *Model) forgetIfEmpty(id string, e *entry) {
	m.dirty[id] = true
	if e.flags != 0 {
		return
	}
	delete(m.entries, id)
	if !e.sampled {
		m.plain--
	}
}

// prune drops the facts of e that left the window and reports whether any did. Its
// contributions went with their bucket.
func (m *Model) prune(e *entry) bool {
	before := e.flags
	// A sampled id's facts leave with its bucket (sample.go), whatever their times.
	gone := e.sampled && !m.bucketIn(e.u)
	if e.flags&fDecision != 0 && (gone || !m.inWindow(e.tD)) {
		// Its samples went with its bucket. The fields are cleared so that nothing
		// of an absent fact stays behind.
		e.flags &^= fDecision
		e.added = 0
		e.tD, e.path, e.x = 0, 0, [decider.LatencyK]int64{}
	}
	// An outcome stamped more than Skew before its decision can leave before the
	// decision does: its sample, in the decision's bucket, goes with it.
	if e.flags&fTTFT != 0 && (gone || !m.inWindow(m.skewed(e.tT))) {
		e.flags &^= fTTFT
		m.remove(e, fTTFT, decider.TargetTTFT)
		e.tT, e.ttft = 0, 0
	}
	if e.flags&fITL != 0 && (gone || !m.inWindow(m.skewed(e.tI))) {
		e.flags &^= fITL
		m.remove(e, fITL, decider.TargetITL)
		e.tI, e.itl = 0, 0
	}
	if e.flags == 0 && before != 0 {
		m.stats.Expired++
		if before&fDecision == 0 || before&(fTTFT|fITL) == 0 {
			m.stats.Unjoined++
		}
	}
	return e.flags != before
}

// Decision records the features of a decision: its id, event time, path and the
// inputs of that path (decider.PathInputs). A decision id seen again is a duplicate
// and changes nothing.
func (m *Model) Decision(id string, t int64, path decider.LatencyPath, in *decider.LatencyInputs) {
	if path >= decider.NumPaths {
		return
	}
	if !m.inWindow(t) {
		m.stats.Late++
		return
	}
	e := m.entry(id, t, t)
	if e == nil || e.flags&fDecision != 0 {
		return
	}
	e.flags |= fDecision
	e.tD, e.path = t, path
	in.Vector(&e.x)
	m.dirty[id] = true
	m.contribute(e)
}

// Outcome records what an outcome of decision id measured: ttftMs when the outcome
// carries a TTFT, itlMs when it carries a mean ITL over at least two output tokens
// (negative: absent). Of two facts of the same kind, the later one (then the
// smaller value) is kept, whatever order they arrive in.
func (m *Model) Outcome(id string, t int64, ttftMs, itlMs float64) {
	if id == "" {
		m.stats.NoDecision++
		return
	}
	hasT, hasI := ttftMs >= 0 && !math.IsNaN(ttftMs), itlMs >= 0 && !math.IsNaN(itlMs)
	if !hasT && !hasI {
		return
	}
	if !m.inWindow(m.skewed(t)) {
		m.stats.Late++
		return
	}
	e := m.entry(id, m.skewed(t), math.MinInt64)
	if e == nil {
		return
	}
	changed := false
	if hasT {
		v := toUnits(ttftMs)
		if e.flags&fTTFT == 0 || t > e.tT || (t == e.tT && v < e.ttft) {
			m.remove(e, fTTFT, decider.TargetTTFT) // the sample of the fact it replaces
			e.flags |= fTTFT
			e.tT, e.ttft = t, v
			changed = true
		}
	}
	if hasI {
		v := toUnits(itlMs)
		if e.flags&fITL == 0 || t > e.tI || (t == e.tI && v < e.itl) {
			m.remove(e, fITL, decider.TargetITL)
			e.flags |= fITL
			e.tI, e.itl = t, v
			changed = true
		}
	}
	if changed {
		m.dirty[id] = true
		m.contribute(e)
	}
}

// entry returns the entry of id for a fact stamped t: for a ULID id, of its bucket's
// sample, if the fact may join it (a decision stamped in the id's bucket, at; an
// outcome stamped no more than Skew before it, latest ≥ its start); otherwise
// created within MaxEntries. nil when the fact is not taken: counted.
func (m *Model) entry(id string, latest, at int64) *entry {
	if u, ok := m.idBucket(id); ok {
		switch {
		case !m.bucketIn(u):
			m.stats.Late++
			return nil
		case m.bucketOf(latest) < u, at != math.MinInt64 && m.bucketOf(at) != u,
			m.clocked && u > m.cur+int64(m.aheadBuckets()):
			m.stats.IDTime++
			return nil
		}
		return m.sampledEntry(id, u)
	}
	if e := m.entries[id]; e != nil {
		return e
	}
	if len(m.entries) >= m.cfg.MaxEntries {
		m.stats.Full++
		return nil
	}
	e := &entry{}
	m.entries[id] = e
	m.plain++
	return e
}

// contribute makes the sums hold exactly e's samples: a target's sample is in the sums
// iff the decision and that target's fact are present. A sample already in is taken
// out first, so a fact counts once; a caller replacing a fact's value removes its old
// sample (remove) before it changes the value.
func (m *Model) contribute(e *entry) {
	for _, tg := range [...]struct {
		flag   uint8
		target decider.LatencyTarget
	}{{fTTFT, decider.TargetTTFT}, {fITL, decider.TargetITL}} {
		if e.added&tg.flag != 0 {
			m.add(e, tg.target, -1)
			e.added &^= tg.flag
		}
		if e.flags&fDecision != 0 && e.flags&tg.flag != 0 {
			if m.add(e, tg.target, 1) {
				e.added |= tg.flag
				m.stats.Samples++
			}
		}
	}
}

// remove takes e's sample of target out of the sums if it is in.
func (m *Model) remove(e *entry, flag uint8, target decider.LatencyTarget) {
	if e.added&flag != 0 {
		m.add(e, target, -1)
		e.added &^= flag
	}
}

// add adds (sign 1) or removes (sign −1) e's sample of target to its bucket.
func (m *Model) add(e *entry, target decider.LatencyTarget, sign int64) bool {
	k := m.bucketOf(e.tD)
	b := m.buckets[k]
	if b == nil {
		if sign < 0 {
			return false
		}
		b = &bucket{}
		m.buckets[k] = b
	}
	a := &b.acc[e.path][target]
	if sign > 0 && a.n >= maxAccSamples {
		m.stats.AccFull++
		return false
	}
	y := e.ttft
	if target == decider.TargetITL {
		y = e.itl
	}
	a.n += sign
	i := 0
	for r := range e.x {
		for c := r; c < len(e.x); c++ {
			a.xx[i] += sign * e.x[r] * e.x[c]
			i++
		}
		a.xy[r] += sign * e.x[r] * y
	}
	a.yy += sign * y * y
	m.sumsDty, m.fitDty = true, true
	if sign < 0 && a.n == 0 && b.empty() {
		// A bucket is in the sums' bytes iff it holds a sample, so that taking a
		// sample out leaves the bytes of never having taken it.
		delete(m.buckets, k)
	}
	return true
}

// empty reports whether no accumulator of b holds a sample; with the sums exact
// integers, every sum is then zero.
func (b *bucket) empty() bool {
	for p := range b.acc {
		for t := range b.acc[p] {
			if b.acc[p][t].n != 0 {
				return false
			}
		}
	}
	return true
}

// toUnits converts ms to the fixed point, rounded and clamped to [0, 2^20].
func toUnits(ms float64) int64 {
	v := math.Round(ms * targetScale)
	if !(v > 0) {
		return 0
	}
	return int64(min(v, decider.MaxLatencyFeature))
}

// TakeDirty returns the ids of the entries changed since the last call, sorted, and
// whether the sums changed; it clears both. The state writes them at the end of a
// chunk of records.
func (m *Model) TakeDirty() (ids []string, sums bool) {
	for id := range m.dirty {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	clear(m.dirty)
	sums, m.sumsDty = m.sumsDty, false
	return ids, sums
}

// Fit returns the current fit, recomputing it when the sums changed since the last
// call (nil when no bucket holds a sample). The fit is immutable: a view may hold it
// while later facts build a new one.
func (m *Model) Fit() *decider.LatencyFit {
	if m.fitDty {
		m.fitDty = false
		m.fit = m.computeFit()
		m.stats.Refits++
	}
	return m.fit
}

// sortedBuckets returns the bucket indexes in ascending order: every computation over
// buckets runs in this order, so that float arithmetic never depends on map order.
func (m *Model) sortedBuckets() []int64 {
	ks := make([]int64, 0, len(m.buckets))
	for k := range m.buckets {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func sortedStrings(s []string) []string {
	slices.Sort(s)
	return s
}
