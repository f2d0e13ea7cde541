package replay

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/parquet-go/parquet-go"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// ExportFile is a decisions export read back as a DecisionSource, so that
// what-if and tune run on a file as they do on the log. Rows outside Window
// are skipped.
type ExportFile struct {
	Path   string
	Window Window
}

// EachDecision implements DecisionSource. Position.Partition and Offset are
// the Kafka position the row was exported from.
func (e *ExportFile) EachDecision(ctx context.Context, fn func(*pb.DecisionRecord, Position) error) error {
	row := 0
	each := func(r *DecisionRow) error {
		row++
		if err := ctx.Err(); err != nil {
			return err
		}
		rec, err := RecordOfRow(r)
		if err != nil {
			return fmt.Errorf("%s row %d: %w", e.Path, row, err)
		}
		if !e.Window.Contains(rec.GetDecidedAtUnixNano()) {
			return nil
		}
		return fn(rec, Position{Partition: r.KafkaPartition, Offset: r.KafkaOffset})
	}
	if !strings.HasSuffix(strings.ToLower(e.Path), ".parquet") {
		return eachJSONL(e.Path, each)
	}
	f, err := os.Open(e.Path)
	if err != nil {
		return err
	}
	defer f.Close()
	r := parquet.NewGenericReader[DecisionRow](f)
	defer r.Close()
	buf := make([]DecisionRow, 256)
	for {
		n, err := r.Read(buf)
		for i := 0; i < n; i++ {
			if ferr := each(&buf[i]); ferr != nil {
				return ferr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("replay: read %s: %w", e.Path, err)
		}
	}
}
