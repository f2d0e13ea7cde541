package main

import (
	"context"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

// vectorsWithoutStartSeries are the labelled families a fresh replica may
// serve without a series, each with why its label values cannot be known
// at start.
var vectorsWithoutStartSeries = map[string]string{
	// Label: the HTTP route template, method and status code of requests
	// served; which of them occur is up to the callers.
	"pdrouter_http_requests_total":           "per request kind served",
	"pdrouter_http_request_duration_seconds": "per route served",
	// Label: the engine source (a registered worker's endpoint), known once
	// workers register; a fresh fleet has none.
	"pdrouter_ingest_batches_total":          "per worker source",
	"pdrouter_ingest_events_total":           "per worker source",
	"pdrouter_ingest_gaps_total":             "per worker source",
	"pdrouter_ingest_replays_total":          "per worker source",
	"pdrouter_ingest_replayed_batches_total": "per worker source",
	"pdrouter_ingest_source_resets_total":    "per worker source",
	"pdrouter_ingest_queue_depth":            "per ZMQ socket, opened once workers register",
}

// kafkaClientPrefix names the franz-go client metrics (kprom): labelled by
// client, broker node and topic, a series exists once that client has talked
// to that broker about that topic, which a producer does at its first record.
const kafkaClientPrefix = "pdrouter_kafka_"

// excused reports whether family name may serve no series at start.
func excused(name string) bool {
	_, ok := vectorsWithoutStartSeries[name]
	return ok || strings.HasPrefix(name, kafkaClientPrefix)
}

// nExcused counts the excused families among names.
func nExcused(names []string) int {
	n := 0
	for _, name := range names {
		if excused(name) {
			n++
		}
	}
	return n
}

// perPartition are the labelled families with a partition label: their
// series exist once the materializer has discovered the topics' partitions,
// shortly after start.
var perPartition = []string{"pdrouter_statestore_offset", "pdrouter_statestore_lag_records"}

// labelledFamilies records the families registered through it that have
// variable labels: the ones that serve no series until a label value is
// used or initialized.
type labelledFamilies struct {
	prometheus.Registerer
	mu    sync.Mutex
	names map[string]bool
}

var descName = regexp.MustCompile(`^Desc\{fqName: "([^"]+)".*variableLabels: \{([^}]*)\}\}$`)

func (r *labelledFamilies) Register(c prometheus.Collector) error {
	if err := r.Registerer.Register(c); err != nil {
		return err
	}
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	r.mu.Lock()
	defer r.mu.Unlock()
	for d := range ch {
		if m := descName.FindStringSubmatch(d.String()); m != nil && m[2] != "" {
			r.names[m[1]] = true
		}
	}
	return nil
}

func (r *labelledFamilies) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// TestFreshReplicaServesEveryLabelledFamily: `serve --ingest`, ready and
// before any decision, serves at least one series of every labelled family
// its parts register (decisions at 0 for every outcome, lag at 0 for every
// topic), so dashboards and alerts see 0 rather than nothing. The families
// whose label values come from traffic are listed above with the reason.
func TestFreshReplicaServesEveryLabelledFamily(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	a := quietApp(t, brokers)
	rf := parseRouterFlags(t, nil, "--router-conditional-disagg")
	var inf ingestFlags
	ifs := pflag.NewFlagSet("ingest", pflag.ContinueOnError)
	inf.bindFlags(ifs)
	if err := ifs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	icfg, err := inf.config(a)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	families := &labelledFamilies{names: map[string]bool{}}
	r := &routerRun{a: a, f: rf, connOpts: []kgo.Opt{kgo.SeedBrokers(brokers...)}, ingestCfg: &icfg,
		registerer: func(reg prometheus.Registerer) prometheus.Registerer {
			families.Registerer = reg
			return families
		}}
	url := runInProcess(t, ctx, r)
	// Before any probe or request: every family whose label values are
	// fixed. The parts register as they start (ingest in a goroutine of its
	// own), so this looks a few times.
	var missing, registered []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		registered = families.sorted()
		served := scrapeFamilies(t, url)
		missing = missing[:0]
		for _, name := range registered {
			if !excused(name) && !slices.Contains(perPartition, name) && len(served[name].GetMetric()) == 0 {
				missing = append(missing, name)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(missing) > 0 {
		t.Errorf("a fresh replica serves no series of %d labelled families:\n  %s", len(missing), strings.Join(missing, "\n  "))
	}
	t.Logf("%d labelled families registered: %d with series at once, %d per partition, %d excused",
		len(registered), len(registered)-len(missing)-nExcused(registered)-len(perPartition), len(perPartition), nExcused(registered))

	// Once ready: the partitions are known too.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get(url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the replica was not ready within 60s")
		}
	}
	var served map[string]*dto.MetricFamily
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		registered = families.sorted()
		served = scrapeFamilies(t, url)
		missing = missing[:0]
		for _, name := range registered {
			if !excused(name) && len(served[name].GetMetric()) == 0 {
				missing = append(missing, name)
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ready, and still no series of %v", missing)
		}
	}
	if len(registered) < 10 {
		t.Fatalf("only %d labelled families registered (%v): the registerer is not the replica's", len(registered), registered)
	}
	for name := range vectorsWithoutStartSeries {
		if !slices.Contains(registered, name) {
			t.Errorf("%s is excused from having a series at start but is not registered: stale exception", name)
		}
	}
	for _, m := range served["pdrouter_decisions_total"].GetMetric() {
		if v := m.GetCounter().GetValue(); v != 0 {
			t.Errorf("a decision was counted before any was asked for: %v = %v", m.GetLabel(), v)
		}
	}
}

// sorted lists the families recorded.
func (r *labelledFamilies) sorted() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(maps.Keys(r.names))
}

// TestReplicaKafkaClientsReportMetrics: a replica serves franz-go's
// pdrouter_kafka_* series for the client that tails the log (the
// materializer's consumer, client="materializer") as for the one that
// writes decisions, so a dashboard sees the fetch side of the replica's
// Kafka traffic, not only the produce side.
func TestReplicaKafkaClientsReportMetrics(t *testing.T) {
	brokers := kafkatest.Fake(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := runInProcess(t, ctx, &routerRun{a: quietApp(t, brokers), f: parseRouterFlags(t, nil), connOpts: []kgo.Opt{kgo.SeedBrokers(brokers...)}})
	want := []string{"decisions", "materializer"}
	var clients []string
	// The materializer creates its consumer once it has listed the
	// partitions, and franz-go counts a connection once it is made: look a
	// few times.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		clients = clients[:0]
		for _, m := range scrapeFamilies(t, url)["pdrouter_kafka_connects_total"].GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "client" && m.GetCounter().GetValue() > 0 && !slices.Contains(clients, lp.GetValue()) {
					clients = append(clients, lp.GetValue())
				}
			}
		}
		slices.Sort(clients)
		if slices.Equal(clients, want) || time.Now().After(deadline) {
			break
		}
	}
	if !slices.Equal(clients, want) {
		t.Fatalf("pdrouter_kafka_connects_total has clients %v, want %v", clients, want)
	}
}

// scrapeFamilies reads url's /metrics.
func scrapeFamilies(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	served, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return served
}
