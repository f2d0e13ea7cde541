package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/pdrouter/pdrouter/events"
	"github.com/pdrouter/pdrouter/events/logtail"
)

func newLogCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "log", Short: "Read the event log"}
	var (
		fromOffset string
		fromTime   string
		partition  int32
		asJSON     bool
		follow     bool
		max        int
	)
	tail := &cobra.Command{
		Use:   "tail <topic>",
		Short: "Decode a topic to JSON lines",
		Long: `tail decodes every record of a topic (kv-events, load, workers, decisions or
outcomes) and prints one line per record. Records that cannot be decoded are
printed with their error and raw bytes (base64), and the tail goes on.
Without --follow it stops at the end offsets it saw when it began.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if a.kafka.Embedded() {
				return fmt.Errorf("log tail needs --brokers (PDR_BROKERS); the dev broker listens on 127.0.0.1:%d by default", defaultDevKafkaPort)
			}
			t, err := events.ParseTopic(args[0])
			if err != nil {
				return err
			}
			if fromOffset != "" && fromTime != "" {
				return fmt.Errorf("--from-offset and --from-time exclude each other")
			}
			from, err := logtail.ParseFromOffset(fromOffset)
			if fromTime != "" {
				from, err = logtail.ParseFromTime(fromTime)
			}
			if err != nil {
				return err
			}
			if max < 0 {
				return fmt.Errorf("--max %d: must be 0 (no limit) or more", max)
			}
			opts, err := a.kafkaOpts("log")
			if err != nil {
				return err
			}
			metrics := events.NewDecodeMetrics(prometheus.NewRegistry())
			w := a.stdout
			if !asJSON {
				w = &textLines{w: a.stdout}
			}
			st, err := logtail.Tail(cmd.Context(), opts, logtail.Options{
				Names: a.names(), Topic: t, Partition: partition, From: from, Follow: follow, Max: max,
			}, w, metrics)
			a.log.Info("log tail done", "topic", t, "records", st.Records, "invalid", st.Invalid)
			return err
		},
	}
	f := tail.Flags()
	f.StringVar(&fromOffset, "from-offset", "", "start, end, an offset N, or -N for the last N records of each partition (default start)")
	f.StringVar(&fromTime, "from-time", "", "first record at or after this time: RFC 3339 or Unix milliseconds")
	f.Int32Var(&partition, "partition", -1, "read only this partition (-1: all)")
	f.BoolVar(&asJSON, "json", false, "print JSON lines (the stable format for tools)")
	f.BoolVar(&follow, "follow", false, "keep reading new records")
	f.IntVar(&max, "max", 0, "stop after this many records (0: no limit)")
	cmd.AddCommand(tail)
	return cmd
}

// textLines renders the JSON lines of logtail for a terminal:
// "topic/partition@offset key schema value".
type textLines struct{ w io.Writer }

func (t *textLines) Write(p []byte) (int, error) {
	var l logtail.Line
	if err := json.Unmarshal(p, &l); err != nil {
		return 0, err
	}
	head := l.Topic + "/" + strconv.Itoa(int(l.Partition)) + "@" + strconv.FormatInt(l.Offset, 10) + " " + l.Timestamp + " key=" + strconv.Quote(l.Key)
	var err error
	switch {
	case l.Error != "":
		_, err = fmt.Fprintf(t.w, "%s ERROR %s\n", head, l.Error)
	case l.Tombstone:
		_, err = fmt.Fprintf(t.w, "%s TOMBSTONE\n", head)
	default:
		_, err = fmt.Fprintf(t.w, "%s %s %s\n", head, l.Schema, l.Value)
	}
	return len(p), err
}
