package api

import (
	"testing"

	"github.com/pdrouter/pdrouter/api/registration"
)

// TestEnginesMatchRegistration keeps the engine names that clients read
// from package registration the ones the endpoint accepts.
func TestEnginesMatchRegistration(t *testing.T) {
	names := registration.Engines()
	if len(engines) != len(names)+1 {
		t.Fatalf("the API accepts %d engine names (with \"\"), registration.Engines lists %d", len(engines), len(names))
	}
	for _, n := range names {
		if _, ok := engines[n]; !ok {
			t.Errorf("registration.Engines lists %q, which the API refuses", n)
		}
	}
}
