package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/pdrouter/pdrouter/api/apitest"
	"github.com/pdrouter/pdrouter/discovery/workerspec"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

func noClient() (kubernetes.Interface, error) { return nil, errors.New("no cluster in this test") }

func noEnv(string) (string, bool) { return "", false }

func TestUsageErrors(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		args []string
		env  map[string]string
		msg  string
	}{
		{nil, nil, "--router-url is required"},
		{[]string{"--router-url", "pdrouter:8080"}, nil, "want http(s)://host:port"},
		{[]string{"--router-url", "http://r:8080", "--log-level", "loud"}, nil, "--log-level"},
		{[]string{"--router-url", "http://r:8080", "extra"}, nil, "unexpected arguments"},
		{nil, map[string]string{"PDR_ROUTER_URL": "http://r:8080", "PDR_RESYNC": "soon"}, "PDR_RESYNC"},
	} {
		var out bytes.Buffer
		lookup := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
		if code := run(ctx, tc.args, lookup, &out, noClient); code != 2 || !strings.Contains(out.String(), tc.msg) {
			t.Errorf("%v %v: exit %d, %q; want 2 and %q", tc.args, tc.env, code, out.String(), tc.msg)
		}
	}
	// A bad option of the watcher is a usage error too, once there is a
	// client.
	var out bytes.Buffer
	fakeClient := func() (kubernetes.Interface, error) { return fake.NewClientset(), nil }
	if code := run(ctx, []string{"--router-url", "http://r:8080", "--selector", ""}, noEnv, &out, fakeClient); code != 2 || !strings.Contains(out.String(), "selector") {
		t.Errorf("empty selector: exit %d, %q", code, out.String())
	}
	if code := run(ctx, []string{"--router-url", "http://r:8080"}, noEnv, &out, noClient); code != 1 {
		t.Errorf("no cluster: exit %d, want 1", code)
	}
	if code := run(ctx, []string{"--help"}, noEnv, &out, noClient); code != 0 || !strings.Contains(out.String(), "[env PDR_ROUTER_URL]") {
		t.Errorf("--help: exit %d, %q", code, out.String())
	}
}

// TestRunRegistersAndServesMetrics runs the command on a fake cluster
// against a real replica, configured from the environment: the pod is
// registered, the metrics and probes are served, and it exits 0 when its
// context ends.
func TestRunRegistersAndServesMetrics(t *testing.T) {
	rep := apitest.Start(t, kafkatest.Fake(t))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "llm", Name: "vllm-0", Labels: map[string]string{"role": "worker"},
			Annotations: map[string]string{workerspec.AnnotationPool: "prefill", workerspec.AnnotationModel: "m", workerspec.AnnotationBlockSize: "16"}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.7",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	client := fake.NewClientset(pod)
	// A free port for the metrics: the logs are read only once the command
	// has returned.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	ln.Close()
	env := map[string]string{"PDR_ROUTER_URL": rep.URL, "PDR_NAMESPACE": "llm", "PDR_SELECTOR": "role=worker",
		"PDR_METRICS_ADDR": ln.Addr().String(), "PDR_ID_PREFIX": "kube"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	ctx, cancel := context.WithCancel(context.Background())
	var logs bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, nil, lookup, &logs, func() (kubernetes.Interface, error) { return client, nil })
	}()
	defer func() {
		cancel()
		if code := <-done; code != 0 || t.Failed() {
			t.Errorf("exit %d; logs:\n%s", code, logs.String())
		}
	}()

	// The router may list the worker a moment before the command has
	// counted the answer to its registration: the metrics are polled too.
	wantMetrics := []string{"pdrouter_discovery_workers 1", `pdrouter_discovery_requests_total{op="register",result="ok"} 1`,
		`pdrouter_discovery_refused_total{annotation="pdrouter.io/block-size"} 0`, "go_goroutines"}
	var metrics string
	deadline := time.Now().Add(30 * time.Second)
	for ; ; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("no registration, ready probe and metrics %q in time; last /metrics:\n%s", wantMetrics, metrics)
			return
		}
		var ws struct {
			Workers []struct {
				WorkerID string `json:"worker_id"`
			}
		}
		if !get(t, rep.URL+"/v1/workers", &ws) || len(ws.Workers) != 1 || ws.Workers[0].WorkerID != "kube.llm.vllm-0" ||
			!get(t, base+"/readyz", nil) {
			continue
		}
		if resp, err := http.Get(base + "/metrics"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			metrics = string(b)
		}
		if !slices.ContainsFunc(wantMetrics, func(m string) bool { return !strings.Contains(metrics, m) }) {
			return
		}
	}
}

// get fetches url; it reports whether it answered 200, and decodes a JSON
// body into out when given.
func get(t *testing.T, url string, out any) bool {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return false // not listening yet
	}
	defer resp.Body.Close()
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode == http.StatusOK
}
