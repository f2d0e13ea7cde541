// Command kafkaready makes one time-bounded attempt to check that a Kafka
// broker really serves the Kafka protocol: it sends a Metadata request and
// requires a known controller and at least one live (unfenced) broker in the
// answer. An open TCP listener is not enough, because a KRaft broker binds
// its port before it has caught up with the metadata log and been unfenced.
//
// It is used by scripts/kafka-local.sh, which loops over attempts and checks
// that the broker process is still alive between them.
//
// Exit status: 0 ready, 1 not ready (reason on stderr), 2 usage error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:39092", "comma-separated bootstrap addresses")
	wait := flag.Duration("wait", 3*time.Second, "time bound for this attempt")
	node := flag.Int("node", -1, "require this node id among the live brokers (-1: any)")
	quiet := flag.Bool("q", false, "print nothing on success")
	flag.Parse()
	if *brokers == "" || *wait <= 0 {
		fmt.Fprintln(os.Stderr, "kafkaready: -brokers must be set and -wait must be positive")
		os.Exit(2)
	}
	if err := check(strings.Split(*brokers, ","), *wait, int32(*node)); err != nil {
		fmt.Fprintln(os.Stderr, "kafkaready:", err)
		os.Exit(1)
	}
	if !*quiet {
		fmt.Println("kafkaready: ok")
	}
}

func check(seeds []string, wait time.Duration, node int32) error {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(seeds...),
		kgo.DialTimeout(wait),
		kgo.RetryTimeout(wait),
	)
	if err != nil {
		return err
	}
	defer cl.Close()
	md, err := kadm.NewClient(cl).BrokerMetadata(ctx)
	if err != nil {
		return fmt.Errorf("metadata request: %w", err)
	}
	if md.Controller < 0 {
		return errors.New("no active controller yet")
	}
	if len(md.Brokers) == 0 {
		return errors.New("no live broker yet (fenced)")
	}
	if node >= 0 {
		for _, b := range md.Brokers {
			if b.NodeID == node {
				return nil
			}
		}
		return fmt.Errorf("node %d not yet among the live brokers", node)
	}
	return nil
}
