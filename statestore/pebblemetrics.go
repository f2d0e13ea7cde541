package statestore

import (
	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
)

// Pebble's own figures, read on each scrape.
//
// Why: a replica's CPU per peer decision grows as its store fills
// (docs/scaling.md, "p at a steady size"), and most of that growth is
// Pebble's background work: flushes and compactions of the keys every
// decision of the group writes. These series let an operator see it
// grow (disk bytes, compaction debt, bytes compacted per second) beside the
// process's CPU, instead of inferring it from a profile.
//
// The collector reads db.Metrics() under dbMu, so a scrape never races
// Close; a closed store reports zeros, and every series exists from the
// start. No label is unbounded: there are none.
type pebbleCollector struct {
	s *Store

	diskBytes, memtableBytes, debtBytes, readAmp *prometheus.Desc
	compactions, compactSeconds, compactedBytes  *prometheus.Desc
	flushes, flushedBytes                        *prometheus.Desc
}

func newPebbleCollector(s *Store) *pebbleCollector {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	return &pebbleCollector{
		s:              s,
		diskBytes:      d("pdrouter_statestore_disk_bytes", "Bytes the store's Pebble files take on disk (tables, blob files, manifests)."),
		memtableBytes:  d("pdrouter_statestore_memtable_bytes", "Bytes held by the store's Pebble memtables, flushed or not yet."),
		debtBytes:      d("pdrouter_statestore_compaction_debt_bytes", "Pebble's estimate of the bytes still to compact for its LSM to settle."),
		readAmp:        d("pdrouter_statestore_read_amplification", "Pebble's read amplification: L0 sublevels plus the non-empty levels below."),
		compactions:    d("pdrouter_statestore_compactions_total", "Pebble compactions completed since the store was opened."),
		compactSeconds: d("pdrouter_statestore_compaction_seconds_total", "Time Pebble's compactions ran, summed, since the store was opened."),
		compactedBytes: d("pdrouter_statestore_compacted_bytes_total", "Bytes Pebble's compactions wrote (tables and blob files) since the store was opened."),
		flushes:        d("pdrouter_statestore_flushes_total", "Pebble memtable flushes completed since the store was opened."),
		flushedBytes:   d("pdrouter_statestore_flushed_bytes_total", "Bytes Pebble's flushes wrote (tables and blob files) since the store was opened."),
	}
}

func (c *pebbleCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.diskBytes, c.memtableBytes, c.debtBytes, c.readAmp,
		c.compactions, c.compactSeconds, c.compactedBytes, c.flushes, c.flushedBytes} {
		ch <- d
	}
}

func (c *pebbleCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.s.pebbleMetrics()
	var compacted, flushed uint64
	for i := range m.Levels {
		l := &m.Levels[i]
		compacted += l.TableBytesCompacted + l.BlobBytesCompacted
		flushed += l.TableBytesFlushed + l.BlobBytesFlushed
	}
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	gauge(c.diskBytes, float64(m.DiskSpaceUsage()))
	gauge(c.memtableBytes, float64(m.MemTable.Size))
	gauge(c.debtBytes, float64(m.Compact.EstimatedDebt))
	gauge(c.readAmp, float64(m.ReadAmp()))
	counter(c.compactions, float64(m.Compact.Count))
	counter(c.compactSeconds, m.Compact.Duration.Seconds())
	counter(c.compactedBytes, float64(compacted))
	counter(c.flushes, float64(m.Flush.Count))
	counter(c.flushedBytes, float64(flushed))
}

// pebbleMetrics returns Pebble's metrics, or zero ones when the store is
// closed.
func (s *Store) pebbleMetrics() *pebble.Metrics {
	s.dbMu.RLock()
	defer s.dbMu.RUnlock()
	if s.db == nil {
		return &pebble.Metrics{}
	}
	return s.db.Metrics()
}
