package api_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
)

// TestOpenAPIDocumentIsFresh: api/openapi/openapi.json is what its generator writes
// today, so the document served and embedded never lags behind gen.py or the decider's
// policy and reason tables that gen.py reads. The generator is Python; without
// python3 the test skips, except under CI=true, where it fails.
func TestOpenAPIDocumentIsFresh(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("python3 is needed to check openapi.json against its generator: %v", err)
		}
		t.Skipf("python3 not found (%v): cannot run api/openapi/gen.py", err)
	}
	out := filepath.Join(t.TempDir(), "openapi.json")
	cmd := exec.Command(py, filepath.Join("openapi", "gen.py"), "--out", out)
	// The generator asks the decider for its enums with `go run`; use this toolchain.
	cmd.Env = append(os.Environ(), "GO="+filepath.Join(runtime.GOROOT(), "bin", "go"))
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gen.py: %v\n%s", err, msg)
	}
	want, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join("openapi", "openapi.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("api/openapi/openapi.json is stale: run `go generate ./api` (python3 api/openapi/gen.py) and commit it\n%s", firstDiff(got, want))
	}
}

// firstDiff shows the first line where the committed and generated documents differ.
func firstDiff(got, want []byte) string {
	g, w := bytes.Split(got, []byte("\n")), bytes.Split(want, []byte("\n"))
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl []byte
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if !bytes.Equal(gl, wl) {
			return "line " + strconv.Itoa(i+1) + ":\n  committed: " + string(gl) + "\n  generated: " + string(wl)
		}
	}
	return ""
}
