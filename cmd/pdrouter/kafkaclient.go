package main

import (
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/kafkaconn"
)

// kafkaOpts are the connection options of a command's Kafka clients, with
// the client id of its role ("pdrouter-router", "pdrouter-ingest",
// "pdrouter-<command>") and franz-go's logs in the command's log.
func (a *app) kafkaOpts(role string) ([]kgo.Opt, error) {
	opts, err := a.kafka.Opts()
	if err != nil {
		return nil, err
	}
	return append(slices.Clone(opts), kafkaconn.ClientOpts(role, a.kafkaLog)...), nil
}
