package latmodel

import (
	"cmp"
	"strings"
	"time"

	"github.com/pdrouter/pdrouter/internal/ulid"
)

// The sample: which decisions the join keeps once there are more than it holds.
//
// Why: a replica group decides thousands of requests a second, and a 10-minute
// window of them is millions of entries, past any MaxEntries a replica can hold. A
// bound that keeps the first facts to arrive makes the model depend on the order a
// replica reads the partitions in, and replicas at equal offsets then learn
// different fits. So the bound is a sample whose members are a function of the set
// of facts: the decisions of each bucket with the smallest hashes of their ids (a
// bottom-k sample, uniform over the bucket's decisions whatever their features).
//
// Ids stamped by pdrouter are ULIDs of the decision's own time, so the bucket of an
// id is known from any of its facts, outcomes that arrive before their decision
// included. Invariants, kept here and in Decision and Outcome:
//
//   - A ULID id u-sampled (entry.sampled) belongs to bucket entry.u, the bucket of its
//     ULID's time. Its decision fact is taken only if stamped in that bucket, and its
//     outcome facts only if stamped no more than Skew before it (Stats.IDTime
//     otherwise), so none of its facts outlives the bucket, and prune drops them all
//     when the bucket leaves the window.
//   - The ids held of bucket u are the smallest (hash, id) among every id any fact of
//     bucket u named while u was in the window, at most perBucket of them: an id
//     refused once is refused for good, since the set's largest key only falls, and
//     an id pushed out takes its facts and samples with it. Each id's entry exists
//     iff it is in its bucket's set, so a store's entries give the sets back
//     (Restore).
//   - No sample opens more than Skew past the clock (aheadBuckets): the state moves
//     the clock to each fact's time first, so only an outcome stamped before its
//     decision's bucket names one, and the open samples are the window's buckets
//     and these, each at most perBucket ids.
//   - Ids that are not ULIDs (other producers, tests, the simulator's request ids)
//     keep the first-come bound of MaxEntries, whose drops are counted (Stats.Full).
//
// What is sampled is which requests the fit learns from, never their weights: the
// fit of a uniform sample estimates the same law with fewer samples.

// sampleHash is FNV-1a (64 bits) of id: fixed across processes, builds and
// machines, unlike Go's map hashing, so every replica ranks ids alike.
func sampleHash(id string) uint64 {
	h := uint64(14695981039346656037)
	for i := range len(id) {
		h ^= uint64(id[i])
		h *= 1099511628211
	}
	return h
}

// compareSampleKey orders ids by hash, then by id: a total order, so that two ids of
// one hash are ranked alike everywhere.
func compareSampleKey(ha uint64, a string, hb uint64, b string) int {
	if c := cmp.Compare(ha, hb); c != 0 {
		return c
	}
	return strings.Compare(a, b)
}

// sampleKey is an id held in its bucket's sample, and its entry.
type sampleKey struct {
	h  uint64
	id string
	e  *entry
}

// sampleSet is a bucket's sample: a max-heap of its keys, so that the id a smaller
// one pushes out is at the top.
type sampleSet []sampleKey

func (s sampleSet) above(i, j int) bool {
	return compareSampleKey(s[i].h, s[i].id, s[j].h, s[j].id) > 0
}

func (s *sampleSet) push(k sampleKey) {
	*s = append(*s, k)
	q := *s
	for j := len(q) - 1; j > 0; {
		p := (j - 1) / 2
		if !q.above(j, p) {
			break
		}
		q[j], q[p] = q[p], q[j]
		j = p
	}
}

// replaceTop puts k in place of the largest key, which the caller has pushed out.
func (s sampleSet) replaceTop(k sampleKey) {
	s[0] = k
	for j := 0; ; {
		c := 2*j + 1
		if c >= len(s) {
			return
		}
		if c+1 < len(s) && s.above(c+1, c) {
			c++
		}
		if !s.above(c, j) {
			return
		}
		s[j], s[c] = s[c], s[j]
		j = c
	}
}

// perBucket is how many ids a bucket's sample holds: MaxEntries over the window's
// buckets and the ones past the clock a sample may open in (aheadBuckets), so that
// the sampled entries stay within MaxEntries.
func (m *Model) perBucket() int {
	return max(1, m.cfg.MaxEntries/(m.cfg.Buckets+m.aheadBuckets()))
}

// aheadBuckets is how many buckets past the clock's an id's bucket may be: an
// outcome, which moves the clock to its time, may be stamped up to Skew before its
// decision's bucket. A fact further ahead (a caller that did not move the clock to
// it) is refused, so that no more samples than the window's and these are open.
func (m *Model) aheadBuckets() int {
	return int((int64(m.cfg.Skew) + m.width - 1) / m.width)
}

// idBucket returns the bucket of a ULID id's time, and false for an id that is not a
// ULID.
func (m *Model) idBucket(id string) (int64, bool) {
	ms, ok := ulid.Millis(id)
	if !ok {
		return 0, false
	}
	return m.bucketOf(ms * int64(time.Millisecond)), true
}

// bucketIn reports whether bucket k is in the window.
func (m *Model) bucketIn(k int64) bool {
	return !m.clocked || k > m.cur-int64(m.cfg.Buckets)
}

// sampledEntry returns the entry of ULID id of bucket u, creating it when id is
// among the bucket's smallest keys and pushing out the largest, or nil (counted)
// when it is not.
func (m *Model) sampledEntry(id string, u int64) *entry {
	s := m.sampleOf(u)
	k := sampleKey{h: sampleHash(id), id: id}
	full := len(*s) >= m.perBucket()
	if full && compareSampleKey(k.h, k.id, (*s)[0].h, (*s)[0].id) > 0 {
		// Above the largest key held, so not held: refused without looking
		// the id up among the entries, as most of a busy group's facts are.
		m.stats.Sampled++
		return nil
	}
	if e := m.entries[id]; e != nil {
		return e
	}
	k.e = &entry{sampled: true, u: u}
	if full {
		m.pushOut((*s)[0])
		s.replaceTop(k)
	} else {
		s.push(k)
	}
	m.entries[id] = k.e
	return k.e
}

// pushOut forgets an id a smaller one took the place of: its facts and their
// samples.
func (m *Model) pushOut(k sampleKey) {
	k.e.flags = 0
	m.contribute(k.e) // takes its samples out
	delete(m.entries, k.id)
	m.dirty[k.id] = true
	m.stats.Sampled++
}

// dropSamples forgets the samples of buckets that left the window, and their ids'
// facts (prune), which leave with them: a bucket's ids are found in its sample, not
// by looking at every entry.
func (m *Model) dropSamples() {
	for k, s := range m.samples {
		if m.bucketIn(k) {
			continue
		}
		for _, key := range *s {
			if m.prune(key.e) {
				m.forgetIfEmpty(key.id, key.e)
			}
		}
		delete(m.samples, k)
	}
}

// restoreSample puts a restored entry of a ULID id back in its bucket's sample, after
// dropping the facts the sample's rules refuse (a store written before them). It
// reports false when nothing of the entry is left.
func (m *Model) restoreSample(id string, e *entry) bool {
	u, ok := m.idBucket(id)
	if !ok {
		return true
	}
	e.sampled, e.u = true, u
	before := e.flags
	if e.flags&fDecision != 0 && m.bucketOf(e.tD) != u {
		e.flags &^= fDecision
		e.tD, e.path, e.x = 0, 0, [len(e.x)]int64{}
	}
	if e.flags&fTTFT != 0 && m.bucketOf(m.skewed(e.tT)) < u {
		e.flags &^= fTTFT
		e.tT, e.ttft = 0, 0
	}
	if e.flags&fITL != 0 && m.bucketOf(m.skewed(e.tI)) < u {
		e.flags &^= fITL
		e.tI, e.itl = 0, 0
	}
	if e.flags != before {
		m.dirty[id] = true
	}
	if e.flags == 0 {
		return false
	}
	m.sampleOf(u).push(sampleKey{h: sampleHash(id), id: id, e: e})
	return true
}

// sampleOf returns bucket u's sample, creating it.
func (m *Model) sampleOf(u int64) *sampleSet {
	if m.samples == nil {
		m.samples = map[int64]*sampleSet{}
	}
	s := m.samples[u]
	if s == nil {
		s = &sampleSet{}
		m.samples[u] = s
	}
	return s
}

// trimSamples pushes out, after a restore, the ids past a bucket's size: a store
// written under a larger MaxEntries, or before the sample.
func (m *Model) trimSamples() {
	per := m.perBucket()
	for _, s := range m.samples {
		for len(*s) > per {
			m.pushOut((*s)[0])
			last := len(*s) - 1
			(*s)[0] = (*s)[last]
			*s = (*s)[:last]
			if last > 0 {
				s.replaceTop((*s)[0])
			}
		}
	}
}
