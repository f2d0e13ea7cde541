package loadgen

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestConnSpeaksHTTP checks the hand-written client against net/http's
// server: the body arrives whole, in order, with its length; responses
// with a Content-Length, chunked ones and ones that close the connection
// are read whole, and the connection is redialed after a close.
func TestConnSpeaksHTTP(t *testing.T) {
	var conns atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.ContentLength != int64(len(b)) || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "bad framing", http.StatusBadRequest)
			return
		}
		_, _ = w.Write(b)
	})
	mux.HandleFunc("/chunked", func(w http.ResponseWriter, r *http.Request) {
		// Larger than net/http's buffer before chunking, and flushed.
		w.(http.Flusher).Flush()
		_, _ = io.WriteString(w, strings.Repeat("x", 5000))
	})
	mux.HandleFunc("/close", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusAccepted)
	})
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()

	k, err := newConn(srv.URL, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer k.close()
	for i := range 3 {
		head := withRequestID(nil, "r1", int64(i))
		code, body, err := k.post("/echo", head, []byte(`"model":"m"}`))
		if err != nil || code != http.StatusOK {
			t.Fatalf("echo %d: %d %v", i, code, err)
		}
		if want := `{"request_id":"bench-r1-` + string(rune('0'+i)) + `","model":"m"}`; string(body) != want {
			t.Fatalf("echo %d: got %s, want %s", i, body, want)
		}
	}
	code, body, err := k.post("/chunked", completedBody, nil)
	if err != nil || code != http.StatusOK || len(body) != 5000 {
		t.Fatalf("chunked: %d, %d bytes, %v", code, len(body), err)
	}
	if code, _, err := k.post("/close", nil, nil); err != nil || code != http.StatusAccepted {
		t.Fatalf("close: %d %v", code, err)
	}
	if code, _, err := k.post("/echo", []byte(`{}`), nil); err != nil || code != http.StatusOK {
		t.Fatalf("after close: %d %v", code, err)
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections; want 2 (one kept alive for 5 requests, one after the close)", n)
	}
}

func TestNewConnRejectsBadURLs(t *testing.T) {
	for _, u := range []string{"ftp://h:1", "http://h:1/v1", "::"} {
		if _, err := newConn(u, time.Second); err == nil {
			t.Errorf("%q: no error", u)
		}
	}
}
