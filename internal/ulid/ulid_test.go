package ulid_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/internal/ulid"
)

// TestTimeReadsBackNew: the time of a new id is its stamp's millisecond,
// from the epoch to the last millisecond 48 bits hold.
func TestTimeReadsBackNew(t *testing.T) {
	for _, at := range []time.Time{
		time.UnixMilli(0),
		time.Date(2026, 12, 6, 21, 4, 5, 678_999_999, time.UTC),
		time.UnixMilli(1<<48 - 1),
	} {
		id := ulid.New(at)
		got, err := ulid.Time(id)
		if err != nil {
			t.Fatalf("Time(New(%s)) = %q: %v", at, id, err)
		}
		if want := at.Truncate(time.Millisecond); !got.Equal(want) {
			t.Fatalf("Time(%s) = %s, want %s", id, got.UTC(), want.UTC())
		}
	}
}

// TestTimeKnownIDs reads fixed ids, so a change of bit order cannot pass
// by changing New and Time together.
func TestTimeKnownIDs(t *testing.T) {
	for id, ms := range map[string]int64{
		"00000000010000000000000000": 1,
		"00000000100000000000000000": 32,
		"0000000100ZZZZZZZZZZZZZZZZ": 1024,
		"7ZZZZZZZZZ0000000000000000": 1<<48 - 1,
	} {
		got, err := ulid.Time(id)
		if err != nil || got.UnixMilli() != ms {
			t.Errorf("Time(%s) = %d ms, %v; want %d ms", id, got.UnixMilli(), err, ms)
		}
	}
}

func TestTimeRefuses(t *testing.T) {
	good := ulid.New(time.Now())
	for _, tc := range []struct {
		id   string
		want error
		says string
	}{
		{"", ulid.ErrLength, "0 bytes"},
		{"nope", ulid.ErrLength, "4 bytes"},
		{good + "0", ulid.ErrLength, "27 bytes"},
		{"01m96hma7c7v1jhgdnvfrgs8pp", ulid.ErrAlphabet, `'m' at position 3`},
		{"A" + good[1:], ulid.ErrOverflow, `'A'`},
		{good[:25] + "U", ulid.ErrAlphabet, `'U' at position 26`},
		{good[:12] + "I" + good[13:], ulid.ErrAlphabet, "position 13"},
		{good[:3] + "\xff" + good[4:], ulid.ErrAlphabet, "position 4"},
		{"8" + good[1:], ulid.ErrOverflow, `'8'`},
		{"ZZZZZZZZZZZZZZZZZZZZZZZZZZ", ulid.ErrOverflow, `'Z'`},
	} {
		_, err := ulid.Time(tc.id)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("Time(%q) = %v, want %v saying %q", tc.id, err, tc.want, tc.says)
		}
	}
}

// FuzzDecisionIDTime: Time never panics, accepts exactly the 26-character
// ids of the alphabet whose first character is at most 7, and what it
// accepts is what New makes of that time: the id's first 10 characters.
func FuzzDecisionIDTime(f *testing.F) {
	f.Add("01ARZ3NDEKTSV4RRFFQ69G5FAV")
	f.Add(ulid.New(time.Now()))
	f.Add("7ZZZZZZZZZZZZZZZZZZZZZZZZZ")
	f.Add("8ZZZZZZZZZZZZZZZZZZZZZZZZZ")
	f.Add("01arz3ndektsv4rrffq69g5fav")
	f.Add("")
	f.Fuzz(func(t *testing.T, id string) {
		at, err := ulid.Time(id)
		valid := len(id) == ulid.Len && strings.IndexByte("01234567", id[0]) >= 0 &&
			strings.Trim(id, "0123456789ABCDEFGHJKMNPQRSTVWXYZ") == ""
		if (err == nil) != valid {
			t.Fatalf("Time(%q) = %v, %v; valid %v", id, at, err, valid)
		}
		if err != nil {
			if len(err.Error()) > 200 {
				t.Fatalf("error quotes the id: %d bytes", len(err.Error()))
			}
			return
		}
		if again := ulid.New(at); again[:10] != id[:10] {
			t.Fatalf("New(Time(%q)) = %q: another time", id, again)
		}
	})
}

// TestMillisAgreesWithTime: Millis accepts exactly what Time accepts, with
// the same millisecond, and builds no error.
func TestMillisAgreesWithTime(t *testing.T) {
	for _, id := range []string{ulid.New(time.UnixMilli(1_700_000_000_123)), "", "01ARZ3NDEKTSV4RRFFQ69G5FAV", "81ARZ3NDEKTSV4RRFFQ69G5FAV",
		"01ARZ3NDEKTSV4RRFFQ69G5FAU", "01arz3ndektsv4rrffq69g5fav", "01ARZ3NDEKTSV4RRFFQ69G5FA", "7ZZZZZZZZZZZZZZZZZZZZZZZZZ"} {
		tm, err := ulid.Time(id)
		ms, ok := ulid.Millis(id)
		if ok != (err == nil) || (ok && ms != tm.UnixMilli()) {
			t.Errorf("%q: Millis %d, %v; Time %v, %v", id, ms, ok, tm, err)
		}
	}
	if n := testing.AllocsPerRun(100, func() { ulid.Millis("not a ulid") }); n != 0 {
		t.Errorf("Millis allocates %v times", n)
	}
}
