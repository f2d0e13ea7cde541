package testsize

import "testing"

func TestCases(t *testing.T) {
	for _, tc := range []struct{ n, sample, race, plain int }{
		{9, 2, 2, 9},
		{5, 0, 1, 5},  // a sample of none still runs one case
		{3, 10, 3, 3}, // never more than there are
	} {
		want := tc.plain
		if Race {
			want = tc.race
		}
		if got := Cases(tc.n, tc.sample); got != want {
			t.Errorf("Cases(%d, %d) = %d under race=%v, want %d", tc.n, tc.sample, got, Race, want)
		}
	}
}
