package door

import (
	"bytes"
	"io"
	"testing"
	"testing/iotest"
)

// TestReadBody: the whole body, whatever its declared length says (absent,
// right, short, long, huge), read in pieces or at once; a declared length
// allocates no more than bodyPresize up front.
func TestReadBody(t *testing.T) {
	for _, size := range []int{0, 1, 511, 512, 6000, bodyPresize, 3*bodyPresize + 7} {
		want := bytes.Repeat([]byte("0123456789"), size/10+1)[:size]
		for _, declared := range []int64{-1, 0, int64(size), int64(size) / 2, int64(size) * 2, 1 << 40} {
			for _, r := range []io.Reader{bytes.NewReader(want), iotest.OneByteReader(bytes.NewReader(want)), iotest.DataErrReader(bytes.NewReader(want))} {
				got, err := readBody(r, declared, nil)
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("size %d, declared %d: %d bytes, %v", size, declared, len(got), err)
				}
			}
		}
	}
	got, err := readBody(bytes.NewReader(nil), 1<<40, nil)
	if err != nil || cap(got) > bodyPresize {
		t.Fatalf("a declared 1 TiB took a buffer of %d bytes (%v)", cap(got), err)
	}
	if _, err := readBody(iotest.ErrReader(io.ErrUnexpectedEOF), 10, nil); err != io.ErrUnexpectedEOF {
		t.Fatalf("a read error: %v", err)
	}
	body := bytes.Repeat([]byte("x"), 6000)
	br := bytes.NewReader(body)
	if a := testing.AllocsPerRun(20, func() { br.Reset(body); _, _ = readBody(br, int64(len(body)), nil) }); a != 1 {
		t.Fatalf("a body of its declared length took %.0f allocations, want 1", a)
	}
	// A buffer with room is reused, whatever it held.
	buf := append(make([]byte, 0, 8000), "stale"...)
	if a := testing.AllocsPerRun(20, func() {
		br.Reset(body)
		got, err := readBody(br, int64(len(body)), buf)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("into a buffer: %d bytes, %v", len(got), err)
		}
	}); a != 0 {
		t.Fatalf("a body read into a buffer with room took %.0f allocations, want 0", a)
	}
}
