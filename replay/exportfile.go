package replay

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strconv"
	"strings"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress/zstd"
)

// Format is an export file format.
type Format string

const (
	// FormatParquet: Apache Parquet, zstd-compressed, candidates as a
	// nested list column; for DuckDB, Spark, pandas/pyarrow, BigQuery.
	FormatParquet Format = "parquet"
	// FormatJSONL: one JSON object per line, the same columns and names.
	FormatJSONL Format = "jsonl"
)

// ParseFormat accepts "parquet" or "jsonl".
func ParseFormat(s string) (Format, error) {
	switch Format(strings.ToLower(s)) {
	case FormatParquet:
		return FormatParquet, nil
	case FormatJSONL, "ndjson", "json":
		return FormatJSONL, nil
	}
	return "", fmt.Errorf("--format %q: want parquet or jsonl", s)
}

// MetaSchemaVersion is the Parquet key-value metadata key that carries the
// export schema version, next to the schema_version column.
const MetaSchemaVersion = "pdrouter.export.schema_version"

// RowWriter writes export rows of one type to a file in one format.
type RowWriter[T any] interface {
	Write(rows ...T) error
	// Close finishes the file (Parquet writes its footer here); it does not
	// close the underlying writer.
	Close() error
}

// NewRowWriter starts an export file of T rows on w.
func NewRowWriter[T any](w io.Writer, f Format, table string) (RowWriter[T], error) {
	switch f {
	case FormatParquet:
		pw := parquet.NewGenericWriter[T](w,
			parquet.Compression(&zstd.Codec{}),
			parquet.MaxRowsPerRowGroup(64<<10),
			parquet.KeyValueMetadata(MetaSchemaVersion, strconv.Itoa(ExportSchemaVersion)),
			parquet.KeyValueMetadata("pdrouter.export.table", table),
			parquet.CreatedBy("pdrouter", "export", "v"+strconv.Itoa(ExportSchemaVersion)),
		)
		return &parquetWriter[T]{w: pw}, nil
	case FormatJSONL:
		bw := bufio.NewWriterSize(w, 1<<20)
		return &jsonlWriter[T]{bw: bw, enc: json.NewEncoder(bw)}, nil
	}
	return nil, fmt.Errorf("replay: unknown format %q", f)
}

type parquetWriter[T any] struct{ w *parquet.GenericWriter[T] }

func (p *parquetWriter[T]) Write(rows ...T) error {
	_, err := p.w.Write(rows)
	return err
}

func (p *parquetWriter[T]) Close() error { return p.w.Close() }

type jsonlWriter[T any] struct {
	bw  *bufio.Writer
	enc *json.Encoder
}

func (j *jsonlWriter[T]) Write(rows ...T) error {
	for i := range rows {
		err := j.enc.Encode(&rows[i])
		var unsupported *json.UnsupportedValueError
		if errors.As(err, &unsupported) {
			// A non-finite float read from the log: written as null rather
			// than ending the export (appendFiniteJSON).
			var line []byte
			if line, err = appendFiniteJSON(nil, reflect.ValueOf(rows[i])); err == nil {
				_, err = j.bw.Write(append(line, '\n'))
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (j *jsonlWriter[T]) Close() error { return j.bw.Flush() }

// ReadRows reads every row of an export file, in either format (by the
// file's extension: .parquet, else JSON lines).
func ReadRows[T any](path string) ([]T, error) {
	if strings.HasSuffix(strings.ToLower(path), ".parquet") {
		rows, err := parquet.ReadFile[T](path)
		if err != nil {
			return nil, fmt.Errorf("replay: read %s: %w", path, err)
		}
		return rows, nil
	}
	var out []T
	err := eachJSONL(path, func(r *T) error { out = append(out, *r); return nil })
	return out, err
}

func eachJSONL[T any](path string, fn func(*T) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	dec := json.NewDecoder(bufio.NewReaderSize(f, 1<<20))
	for line := 1; ; line++ {
		var r T
		err := dec.Decode(&r)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("replay: %s row %d: %w", path, line, err)
		}
		if err := fn(&r); err != nil {
			return err
		}
	}
}
