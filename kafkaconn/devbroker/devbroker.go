// Package devbroker runs the embedded development broker: franz-go's kfake,
// in-process, persisting to a local folder so the log survives a restart.
//
// It exists so `make run` and a user's laptop need no external service. It is
// a single-process test double of Kafka, not a production broker: no
// replication, no durability beyond the page cache. Everything that starts
// it says so.
package devbroker

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Label is printed by every command that serves from the dev broker.
const Label = "DEVELOPMENT BROKER (franz-go kfake, in-process; not for production)"

// Broker is a running dev broker.
type Broker struct {
	cluster *kfake.Cluster
	dir     string
}

// Option configures Start.
type Option func(*config)

type config struct {
	port       int
	partitions int
}

// Port fixes the TCP port on 127.0.0.1 (0 picks a free one). A fixed port
// lets other tools (kcat, a second pdrouter) find the broker.
func Port(p int) Option { return func(c *config) { c.port = p } }

// Start opens (or creates) the broker's data under dir and listens on
// 127.0.0.1.
func Start(dir string, opts ...Option) (*Broker, error) {
	var c config
	for _, o := range opts {
		o(&c)
	}
	if c.port < 0 || c.port > 65535 {
		return nil, fmt.Errorf("devbroker: port %d out of range [0, 65535]", c.port)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("devbroker: data dir: %w", err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if c.port != 0 {
		// kfake's own error for a taken port is terse; check first so the
		// message says which port and what to do.
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", c.port))
		if err != nil {
			if errors.Is(err, syscall.EADDRINUSE) {
				return nil, fmt.Errorf("devbroker: 127.0.0.1:%d is already in use (another pdrouter dev?): stop it or pass --kafka-port", c.port)
			}
			return nil, fmt.Errorf("devbroker: %w", err)
		}
		ln.Close()
	}
	kopts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.DataDir(abs),
		kfake.ClusterID("pdrouter-dev"),
	}
	if c.port != 0 {
		kopts = append(kopts, kfake.Ports(c.port))
	}
	cl, err := kfake.NewCluster(kopts...)
	if err != nil {
		return nil, fmt.Errorf("devbroker: start kfake with data in %s: %w", abs, err)
	}
	return &Broker{cluster: cl, dir: abs}, nil
}

// Addrs are the broker's listen addresses.
func (b *Broker) Addrs() []string { return b.cluster.ListenAddrs() }

// Dir is where the log is kept.
func (b *Broker) Dir() string { return b.dir }

// Close stops the broker and flushes its data to disk.
func (b *Broker) Close() { b.cluster.Close() }
