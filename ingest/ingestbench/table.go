package ingestbench

import (
	"fmt"
	"time"

	"github.com/pdrouter/pdrouter/internal/benchtable"
)

// bar is ingest's throughput bar: one-block events per second, one event
// per message, into the real broker.
const bar = 200e3

// rows are a run's lines of the table: the rate, and the CPU of each
// process.
func (m measurement) rows(broker string) []Result {
	per := fmt.Sprintf("%d events per ZMQ message", m.EventsPerMessage)
	if m.EventsPerMessage == 1 {
		per = "1 event per ZMQ message"
	}
	rate := m.eventsPerSecond()
	r := benchtable.NewRow("events/s, "+per, fmt.Sprintf("%.0fk events/s", rate/1e3), "report", "",
		fmt.Sprintf("%d one-block events in %d messages, %s, every one acknowledged; %s",
			m.Events(), m.Messages, m.wall.Round(time.Millisecond), broker))
	if m.EventsPerMessage == 1 {
		r.Bar, r.Verdict = "≥ 200k (real broker)", benchtable.Verdict(rate >= bar)
	}
	where := "ingest and its Kafka client"
	if broker == kfakeLabel {
		where += ", and the in-process kfake"
	}
	if !m.pubApart {
		where += ", and the publisher"
	}
	cpu := benchtable.NewRow("ingest process CPU, "+per, cores(m.ingestCPU, m.wall), "report", "",
		fmt.Sprintf("%.2f µs per event; getrusage self over the run (%s)",
			float64(m.ingestCPU.Microseconds())/float64(m.Events()), where))
	pub := benchtable.NewRow("publisher process CPU, "+per, cores(m.pubCPU, m.wall), "report", "",
		fmt.Sprintf("%.2fs over its whole life, in its own process", m.pubCPU.Seconds()))
	if !m.pubApart {
		pub.Value, pub.Detail = "—", "in-process publisher: its CPU is in the ingest row"
	}
	return []Result{r, cpu, pub}
}

func cores(cpu, wall time.Duration) string {
	return fmt.Sprintf("%.2f cores", cpu.Seconds()/wall.Seconds())
}
