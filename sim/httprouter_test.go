package sim

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestRegisterSendsHTTPURL: the registration carries http_url; a router that refuses
// the field as unknown (as pdrouter's strict API did before it) gets the registration
// again without it, and any other refusal is returned.
func TestRegisterSendsHTTPURL(t *testing.T) {
	var (
		mu     sync.Mutex
		bodies []string
	)
	strict := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		if _, ok := m["http_url"]; ok && strict {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":{"code":"unknown_field","field":"http_url","message":"unknown field \"http_url\""}}`))
			return
		}
		if m["worker_id"] == "bad" {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":{"code":"invalid_value","field":"worker_id","message":"no"}}`))
			return
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	h, err := NewHTTPRouter(srv.URL, "", "m", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	reg := WorkerRegistration{WorkerID: "decode-0", Pool: "decode", Model: "m", BlockSize: 16, TotalKVBlocks: 8, HTTPURL: "http://127.0.0.1:1"}
	if err := h.Register(context.Background(), reg); err != nil {
		t.Fatal(err)
	}
	if len(bodies) != 2 || !strings.Contains(bodies[0], `"http_url":"http://127.0.0.1:1"`) || strings.Contains(bodies[1], "http_url") {
		t.Fatalf("bodies %q", bodies)
	}
	strict, bodies = false, nil
	if err := h.Register(context.Background(), reg); err != nil || len(bodies) != 1 || !strings.Contains(bodies[0], "http_url") {
		t.Fatalf("accepting router: %v %q", err, bodies)
	}
	reg.WorkerID = "bad"
	if err := h.Register(context.Background(), reg); err == nil {
		t.Fatal("a refusal of another field was swallowed")
	}
}
