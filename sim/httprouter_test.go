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
	"time"
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

// TestWaitWorkersWaitsForReadiness: a router restarted on an existing log
// lists the workers it read back (the same ids a second `pdrouter dev`
// registers) while it is still reading the log, and answers routing 503
// not_ready meanwhile; the fleet waits for /readyz before it sends its
// workload. A router without /readyz (404) counts as ready.
func TestWaitWorkersWaitsForReadiness(t *testing.T) {
	for _, c := range []struct {
		name     string
		notReady int // /readyz answers 503 this many times, then 200
		noProbe  bool
	}{{name: "replaying", notReady: 3}, {name: "without /readyz", noProbe: true}} {
		t.Run(c.name, func(t *testing.T) {
			var mu sync.Mutex
			probes := 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.URL.Path {
				case "/readyz":
					if c.noProbe {
						http.NotFound(w, r)
						return
					}
					mu.Lock()
					probes++
					n := probes
					mu.Unlock()
					if n <= c.notReady {
						w.WriteHeader(http.StatusServiceUnavailable)
						_, _ = w.Write([]byte(`{"error":{"code":"not_ready","message":"replaying"}}`))
						return
					}
					w.WriteHeader(http.StatusOK)
				case "/v1/workers":
					_, _ = w.Write([]byte(`{"workers":[{"worker_id":"decode-0"}]}`))
				default:
					http.NotFound(w, r)
				}
			}))
			defer srv.Close()
			h, err := NewHTTPRouter(srv.URL, "", "m", nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := h.WaitWorkers(ctx, []string{"decode-0"}); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if !c.noProbe && probes != c.notReady+1 {
				t.Fatalf("WaitWorkers returned after %d /readyz probes; the router was ready at probe %d", probes, c.notReady+1)
			}
		})
	}
}
