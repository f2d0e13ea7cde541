package kafkaconn

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"
)

// MetricsNamespace prefixes franz-go's client metrics: pdrouter_kafka_*.
const MetricsNamespace = "pdrouter_kafka"

// Metrics reports one client's metrics (connections, bytes and records
// produced and fetched, request latencies) on reg, labeled client=name.
//
// Give it to one client only, with a name fixed in the code ("decisions",
// "ingest", ...): franz-go's hooks do not say which client they are called
// for, so each client needs its own collectors, and a second client with
// the same name on the same registry would register them twice. Series are
// per broker (node_id, bounded by the cluster) and per topic (bounded by
// pdrouter's topics), never per partition.
func Metrics(reg prometheus.Registerer, name string) kgo.Opt {
	return kgo.WithHooks(kprom.NewMetrics(MetricsNamespace,
		kprom.Registerer(reg),
		kprom.WithStaticLabel(prometheus.Labels{"client": name}),
		kprom.FetchAndProduceDetail(kprom.ByNode, kprom.ByTopic, kprom.Records, kprom.UncompressedBytes, kprom.ConsistentNaming),
		kprom.BrokerLabels(kprom.BrokerNodeID),
	))
}
