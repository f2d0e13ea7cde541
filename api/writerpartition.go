package api

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events"
)

// WriterPartitioner is the partitioner of a replica of cell that shares
// its load as snapshots (serve --load-deltas snapshots): every load-deltas
// record it produces goes to its own partition, events.WriterPartition,
// the only one its store reads back for its restart, whatever the record's
// key (the decode worker, which the delta's rules read), and every
// load-shares record to its partition of that topic, which its cell's
// peers read. Records of every other topic are partitioned as franz-go's
// default does (keyed records by Kafka's murmur2 hash, events.KeyPartition),
// so decisions and outcomes stay in their worker's partition and cell.
func WriterPartitioner(names events.Names, writer string, cell events.Cell) kgo.Partitioner {
	own := kgo.BasicConsistentPartitioner(func(string) func(*kgo.Record, int) int {
		return func(_ *kgo.Record, n int) int { return int(events.WriterPartition(writer, int32(n), cell)) }
	})
	return writerPartitioner{
		own: map[string]bool{names.Physical(events.TopicLoadDeltas): true, names.Physical(events.TopicLoadShares): true},
		at:  own,
		// franz-go's default partitioner (kgo.RecordPartitioner's doc).
		other: kgo.UniformBytesPartitioner(64<<10, true, true, nil),
	}
}

type writerPartitioner struct {
	own       map[string]bool // the topics of the writer's own partition
	at, other kgo.Partitioner
}

func (p writerPartitioner) ForTopic(topic string) kgo.TopicPartitioner {
	if p.own[topic] {
		return p.at.ForTopic(topic)
	}
	return p.other.ForTopic(topic)
}
