package discovery

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/api"
	"github.com/pdrouter/pdrouter/api/apitest"
	"github.com/pdrouter/pdrouter/api/registration"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

// TestRouterAgainstTheRealAPI: the client's requests and its reading of the
// answers, on a real replica with a bearer token.
func TestRouterAgainstTheRealAPI(t *testing.T) {
	rep := apitest.Start(t, kafkatest.Fake(t), api.WithAuthToken("s3cret"))
	ctx := context.Background()
	anon, err := NewRouter(rep.URL)
	if err != nil {
		t.Fatal(err)
	}
	var re *RouterError
	if _, err := anon.WorkerIDs(ctx, ""); !errors.As(err, &re) || re.Status != http.StatusUnauthorized || !re.Permanent() {
		t.Fatalf("without the token: %v", err)
	}
	r, err := NewRouter(rep.URL+"/", WithAuthToken("s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Register(ctx, registration.Request{WorkerID: "k8s.a.b", Pool: "decode", Model: "m", BlockSize: 16}); err != nil {
		t.Fatal(err)
	}
	// A refusal carries the API's code and field, and is permanent.
	err = r.Register(ctx, registration.Request{WorkerID: "k8s.a.c", Pool: "decode", Model: "m", BlockSize: 16, HTTPURL: "http://0.0.0.0:8000"})
	if !errors.As(err, &re) || re.Status != http.StatusUnprocessableEntity || re.Code != "invalid_value" || re.Field != "http_url" || !re.Permanent() {
		t.Fatalf("bad http_url: %v", err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got, err := r.WorkerIDs(ctx, "k8s.a.")
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 1 && got["k8s.a.b"] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("WorkerIDs = %v", got)
		}
	}
	if got, _ := r.WorkerIDs(ctx, "k8s.other."); len(got) != 0 {
		t.Fatalf("WorkerIDs under another prefix = %v", got)
	}
	if gone, err := r.Deregister(ctx, "k8s.a.b"); err != nil || !gone {
		t.Fatalf("Deregister = %v, %v", gone, err)
	}
	// Unknown to the router: gone already, no error.
	if gone, err := r.Deregister(ctx, "k8s.a.never"); err != nil || gone {
		t.Fatalf("Deregister of an unknown worker = %v, %v", gone, err)
	}
}

// TestRouterBoundsAnswers: a --router-url that points at something else
// than a replica gets errors, never a huge read or a misreading.
func TestRouterBoundsAnswers(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodGet:
			_, _ = w.Write([]byte(`<html>not json</html>`))
		case strings.HasSuffix(r.URL.Path, "/big"):
			_, _ = w.Write([]byte(strings.Repeat("x", MaxAnswerBytes+1)))
		case strings.HasSuffix(r.URL.Path, "/slow"):
			time.Sleep(time.Second)
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	r, err := NewRouter(srv.URL, WithRouterTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := r.WorkerIDs(ctx, ""); err == nil || !strings.Contains(err.Error(), "not a worker list") {
		t.Fatalf("non-JSON list: %v", err)
	}
	if _, err := r.Deregister(ctx, "big"); err == nil || !strings.Contains(err.Error(), "over") {
		t.Fatalf("oversized answer: %v", err)
	}
	if _, err := r.Deregister(ctx, "slow"); err == nil || isPermanent(err) {
		t.Fatalf("timeout: %v (must be retried)", err)
	}
	err = r.Register(ctx, registration.Request{WorkerID: "w"})
	var re *RouterError
	if !errors.As(err, &re) || re.Status != http.StatusServiceUnavailable || re.Permanent() {
		t.Fatalf("503: %v (must be retried)", err)
	}
	for _, bad := range []string{"", "pdrouter:8080", "ftp://x", "http://", "http://x/?q=1"} {
		if _, err := NewRouter(bad); err == nil {
			t.Errorf("NewRouter(%q) accepted", bad)
		}
	}
	if _, err := NewRouter("http://x", WithRouterTimeout(0)); err == nil {
		t.Error("a zero timeout was accepted")
	}
	if (&RouterError{Status: 422, Code: "too_many_workers"}).Permanent() {
		t.Error("too_many_workers must be retried")
	}
}
