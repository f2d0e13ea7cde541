package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/pdrouter/pdrouter/events"
	"github.com/pdrouter/pdrouter/internal/textcut"
)

// maxCellInputBytes bounds what `cell` reads from stdin.
const maxCellInputBytes = 64 << 20

// maxNamesScan bounds the ids --names-for hashes: about count·n of them
// (a cell holds one id in n), a few seconds of CPU at this bound.
const maxNamesScan = 100_000_000

func newCellCmd(a *app) *cobra.Command {
	var (
		cells    int32
		namesFor string
		count    int
	)
	cmd := &cobra.Command{
		Use:   "cell [worker-id ...] | cell --names-for i/n --count k prefix",
		Short: "Print the cell of each worker, and how many workers each cell holds",
		Long: `cell prints, for each worker id (the arguments, or one per line on stdin), the
cell of --cells that holds its records: the one whose replicas (serve --cell
i/n) route to it, take its registration, and whose ingest (--cell) reads its
engine. The cell follows from the id alone (Kafka's default partitioner hashes
it), so plan workers and cells with it before registering: a registration sent
to another cell's replica is answered 421 wrong_cell. The summary counts each
pool.s share when ids are given as pool/id, the pool decode or prefill (e.g. decode/decode-7).

Hashing spreads workers unevenly: decode-0 … decode-127 fall 32, 24, 33 and 39
into 4 cells. To fill each cell evenly, name workers with --names-for i/n
--count k prefix, which prints the first k ids prefix0, prefix1, … that fall
in cell i of n.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if namesFor != "" {
				c, err := events.ParseCell(namesFor)
				if err != nil {
					return fmt.Errorf("--names-for: %w", err)
				}
				if len(args) != 1 || count < 1 || count > 1_000_000 {
					return errors.New("--names-for takes one prefix and --count 1 to 1000000")
				}
				if scan := int64(count) * int64(c.Count); scan > maxNamesScan {
					return fmt.Errorf("--names-for %s --count %d hashes ~%d ids, over %d: ask for fewer ids, or fewer cells", c, count, scan, maxNamesScan)
				}
				return printNamesFor(a.stdout, c, args[0], count)
			}
			if cells < 1 || cells > events.MaxCells {
				return fmt.Errorf("--cells %d: want 1 to %d", cells, events.MaxCells)
			}
			ids := args
			if len(ids) == 0 {
				var err error
				if ids, err = readLines(cmd.InOrStdin()); err != nil {
					return err
				}
			}
			return printCells(a.stdout, ids, cells)
		},
	}
	cmd.Flags().Int32Var(&cells, "cells", 2, "how many cells the log is split into (the n of serve --cell i/n)")
	cmd.Flags().StringVar(&namesFor, "names-for", "", "print worker ids that fall in this cell, i/n, instead")
	cmd.Flags().IntVar(&count, "count", 1, "how many ids --names-for prints")
	return cmd
}

// printNamesFor prints the first count ids prefix+k (k = 0, 1, …) in c.
func printNamesFor(w io.Writer, c events.Cell, prefix string, count int) error {
	bw := bufio.NewWriter(w)
	for k := 0; count > 0; k++ {
		id := prefix + strconv.Itoa(k)
		if !c.OwnsWorker(id) {
			continue
		}
		// Every id printed is one a registration takes (a longer k can
		// make it too long).
		if err := events.ValidateWorkerID(id); err != nil {
			_ = bw.Flush()
			return fmt.Errorf("prefix %q: %w", textcut.Truncate(prefix, 64), err)
		}
		fmt.Fprintln(bw, id)
		count--
	}
	return bw.Flush()
}

// readLines reads the non-empty, trimmed lines of r, at most
// maxCellInputBytes of them.
func readLines(r io.Reader) ([]string, error) {
	sc := bufio.NewScanner(io.LimitReader(r, maxCellInputBytes+1))
	var out []string
	n := 0
	for sc.Scan() {
		n += len(sc.Bytes()) + 1
		if n > maxCellInputBytes {
			return nil, fmt.Errorf("stdin: more than %d bytes of worker ids", maxCellInputBytes)
		}
		if l := strings.TrimSpace(sc.Text()); l != "" {
			out = append(out, l)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("stdin: %w", err)
	}
	if len(out) == 0 {
		return nil, errors.New("no worker id: give them as arguments or one per line on stdin")
	}
	return out, nil
}

// printCells writes each id's cell, then the workers per cell (and per
// pool, for ids written pool/id).
func printCells(w io.Writer, ids []string, cells int32) error {
	per := make([]map[string]int, cells)
	for i := range per {
		per[i] = map[string]int{}
	}
	var pools []string
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "worker\tcell")
	for _, in := range ids {
		pool, id, hasPool := strings.Cut(in, "/")
		if !hasPool {
			pool, id = "", in
		} else if pool != "decode" && pool != "prefill" {
			return fmt.Errorf("%q: pool %q: want decode or prefill", textcut.Truncate(in, 64), textcut.Truncate(pool, 64))
		}
		if err := events.ValidateWorkerID(id); err != nil {
			return fmt.Errorf("%q: %w", textcut.Truncate(in, 64), err)
		}
		c := events.CellOfWorker(id, cells)
		fmt.Fprintf(tw, "%s\t%s\n", in, c)
		if !slices.Contains(pools, pool) {
			pools = append(pools, pool)
		}
		per[c.Index][pool]++
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	header := "cell\tworkers\t"
	for _, p := range pools {
		if p != "" {
			header += p + "\t"
		}
	}
	fmt.Fprintln(tw, header)
	for i, m := range per {
		total := 0
		row := ""
		for _, p := range pools {
			total += m[p]
			if p != "" {
				row += fmt.Sprintf("%d\t", m[p])
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\n", events.Cell{Index: int32(i), Count: cells}, total, row)
	}
	return tw.Flush()
}
