// Package testsize sizes the long property tests whose code runs on one
// goroutine.
//
// The race detector slows such a test 10–25× (api's decision-size property:
// about 5 s without it, 130 s with it) and can find nothing in code that no
// second goroutine touches. So under -race these tests check a sample of
// their cases, which keeps the detector on every line they reach, and
// `make test` runs them whole in a pass without -race (scripts/test.sh,
// "property tests without the race detector"). A test sized here must
// therefore be listed in that pass.
package testsize

// Race reports whether the test binary was built with -race.
const Race = race

// Cases returns n, or under the race detector the first sample of them
// (at least one, at most n): the cases a test runs.
func Cases(n, sample int) int {
	if !Race {
		return n
	}
	return max(1, min(n, sample))
}
