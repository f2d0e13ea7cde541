package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/pdrouter/pdrouter/statestore"
)

// newStateCmd is `pdrouter state …`: inspect a replica's store.
func newStateCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "state", Short: "Inspect a replica's materialized state (the Pebble store under --data-dir)"}
	digest := &cobra.Command{
		Use:   "digest",
		Short: "Print the state digest and offset vector of a store",
		Long: `digest reads the store in --data-dir/store and prints its state digest (a
hash of every key and value, in key order) and the offset vector it reflects.
Two replicas at the same offsets have the same digest; a store rebuilt by
replay reaches the same digest at the same offsets. Stop the replica first:
a store is opened by one process at a time. A store of --load-deltas
snapshots also prints the digest of its writer's own part; its peers'
load-share rows are never stored, so its digest holds none of them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir := filepath.Join(a.dataDir, statestore.StoreDirName)
			if entries, err := os.ReadDir(dir); err != nil || len(entries) == 0 {
				return fmt.Errorf("no store in %s (--data-dir %s)", dir, a.dataDir)
			}
			// A store of --load-deltas snapshots names its writer; the
			// others say what they were built as only by refusing the other
			// layouts (statestore.ErrWrongSource): try serve's default first
			// (--load-deltas apply, --peer-requests memory), then the others.
			layouts := []statestore.Options{
				{Source: statestore.SourceLoadDeltas, PeerSums: true},
				{Source: statestore.SourceLoadDeltas},
				{Source: statestore.SourceDecisions},
			}
			writer, shares, err := statestore.WriterOf(dir)
			if err != nil {
				return err
			}
			if shares {
				layouts = []statestore.Options{
					{Source: statestore.SourceLoadShares, ReplicaID: writer, PeerSums: true},
					{Source: statestore.SourceLoadShares, ReplicaID: writer},
				}
			}
			var s *statestore.Store
			err = statestore.ErrWrongSource
			for _, o := range layouts {
				if !errors.Is(err, statestore.ErrWrongSource) {
					break
				}
				o.Names, o.Logger, o.Registerer = a.names(), a.log, prometheus.NewRegistry()
				s, err = statestore.Open(dir, o)
			}
			if err != nil {
				return err
			}
			defer s.Close()
			d, err := s.Digest()
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "digest  %s\n", d)
			if shares {
				// The rows of peers' load shares live in memory only, read
				// from load-shares at every open: a stopped store's digest
				// holds none of them.
				fmt.Fprintf(a.stdout, "private %x  (writer %q's own requests; peers' load-share rows are not stored)\n", d.Private, writer)
			}
			fmt.Fprintf(a.stdout, "keys    %d\n", d.Keys)
			var total int64
			for _, p := range d.Offsets {
				total += p.Next
			}
			fmt.Fprintf(a.stdout, "offsets %d partitions, %d records applied\n", len(d.Offsets), total)
			for _, p := range d.Offsets {
				fmt.Fprintf(a.stdout, "  %-10s %3d  %d\n", p.Topic, p.Partition, p.Next)
			}
			return nil
		},
	}
	cmd.AddCommand(digest)
	return cmd
}
