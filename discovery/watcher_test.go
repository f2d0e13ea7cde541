package discovery

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/pdrouter/pdrouter/api"
	"github.com/pdrouter/pdrouter/api/apitest"
	"github.com/pdrouter/pdrouter/discovery/workerspec"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

// These tests run the watcher on client-go's fake clientset against a real
// router replica (api/apitest: the API, a Pebble statestore and its
// materializer on an in-process Kafka), so every registration the watcher
// sends is validated by the real endpoint and checked in GET /v1/workers.

// fixture is a replica, a fake cluster and a running watcher.
type fixture struct {
	t      *testing.T
	url    string
	client kubernetes.Interface
	w      *Watcher
	router *Router
}

func newFixture(t *testing.T, pods []*corev1.Pod) *fixture {
	t.Helper()
	rep := apitest.Start(t, kafkatest.Fake(t))
	router, err := NewRouter(rep.URL)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, url: rep.URL, router: router, client: fake.NewClientset(podObjects(pods)...)}
}

func podObjects(pods []*corev1.Pod) []runtime.Object {
	out := make([]runtime.Object, len(pods))
	for i, p := range pods {
		out[i] = p
	}
	return out
}

// start runs the watcher until the test ends.
func (f *fixture) start(opts ...Option) {
	f.t.Helper()
	w, err := New(f.client, f.router, append([]Option{WithRegisterer(prometheus.NewRegistry()), WithResync(time.Hour)}, opts...)...)
	if err != nil {
		f.t.Fatal(err)
	}
	f.w = w
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	f.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			f.t.Errorf("Run: %v", err)
		}
	})
}

// workers is the router's GET /v1/workers, by worker id.
func (f *fixture) workers() map[string]api.WorkerStatus {
	f.t.Helper()
	resp, err := http.Get(f.url + "/v1/workers")
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	var ans struct{ Workers []api.WorkerStatus }
	if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil {
		f.t.Fatal(err)
	}
	out := map[string]api.WorkerStatus{}
	for _, w := range ans.Workers {
		out[w.WorkerID] = w
	}
	return out
}

// waitFor polls until cond holds on the router's workers, for 30 s.
func (f *fixture) waitFor(what string, cond func(map[string]api.WorkerStatus) bool) map[string]api.WorkerStatus {
	f.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ws := f.workers()
		if cond(ws) {
			return ws
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("timed out waiting for %s; the router has %v", what, ids(ws))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitIDs waits until the router's worker ids are exactly want.
func (f *fixture) waitIDs(want ...string) map[string]api.WorkerStatus {
	f.t.Helper()
	slices.Sort(want)
	return f.waitFor(strings.Join(want, ", "), func(ws map[string]api.WorkerStatus) bool { return slices.Equal(ids(ws), want) })
}

// waitMetric polls a series until it has the value want, for 10 s: the
// router may apply a registration before the watcher, which sent it, has
// counted its answer.
func waitMetric(t *testing.T, what string, c prometheus.Collector, want float64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); testutil.ToFloat64(c) != want; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v, want %v", what, testutil.ToFloat64(c), want)
		}
	}
}

func ids(ws map[string]api.WorkerStatus) []string {
	out := make([]string, 0, len(ws))
	for id := range ws {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

func (f *fixture) update(p *corev1.Pod) {
	f.t.Helper()
	if _, err := f.client.CoreV1().Pods(p.Namespace).Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) updateStatus(p *corev1.Pod) {
	f.t.Helper()
	if _, err := f.client.CoreV1().Pods(p.Namespace).UpdateStatus(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) create(p *corev1.Pod) {
	f.t.Helper()
	if _, err := f.client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

// register posts a registration by hand, as an operator would.
func (f *fixture) register(id string) {
	f.t.Helper()
	body := `{"worker_id":"` + id + `","pool":"prefill","model":"llama","block_size":16}`
	resp, err := http.Post(f.url+"/v1/workers", "application/json", strings.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		f.t.Fatalf("registering %s by hand: %d", id, resp.StatusCode)
	}
}

func notReady(p *corev1.Pod) *corev1.Pod {
	p = p.DeepCopy()
	p.Status.Conditions[0].Status = corev1.ConditionFalse
	return p
}

func TestWatcherFollowsPods(t *testing.T) {
	a := workerPod("llm", "a", "10.0.0.1")
	b := notReady(workerPod("llm", "b", "10.0.0.2"))
	unlabelled := workerPod("llm", "c", "10.0.0.3")
	unlabelled.Labels = map[string]string{"app": "other"}
	elsewhere := workerPod("other", "d", "10.0.0.4")
	f := newFixture(t, []*corev1.Pod{a, b, unlabelled, elsewhere})
	f.start(WithNamespace("llm"))

	// Only the Ready, selected pod of the namespace, with its endpoints
	// built from its IP and annotations.
	ws := f.waitIDs("k8s.llm.a")
	w := ws["k8s.llm.a"]
	if w.Pool != "decode" || w.Model != "llama" || w.BlockSize != 16 || w.TotalKVBlocks == nil || *w.TotalKVBlocks != 4096 ||
		w.HTTPURL != "http://10.0.0.1:8000" || w.KVEventsEndpoint != "tcp://10.0.0.1:5557" || w.MetricsURL != "http://10.0.0.1:8000/metrics" {
		t.Fatalf("registration of a: %+v", w)
	}

	// b becomes Ready: registered.
	b = b.DeepCopy()
	b.Status.Conditions[0].Status = corev1.ConditionTrue
	f.updateStatus(b)
	f.waitIDs("k8s.llm.a", "k8s.llm.b")

	// a's IP changes: registered again with the new URLs.
	a = a.DeepCopy()
	a.Status.PodIP = "10.0.0.9"
	f.updateStatus(a)
	f.waitFor("a at its new IP", func(ws map[string]api.WorkerStatus) bool {
		w := ws["k8s.llm.a"]
		return w.HTTPURL == "http://10.0.0.9:8000" && w.KVEventsEndpoint == "tcp://10.0.0.9:5557"
	})

	// b stops being Ready: removed.
	f.updateStatus(notReady(b))
	f.waitIDs("k8s.llm.a")

	// a starts terminating: removed at once, though still Ready.
	now := metav1.Now()
	a = a.DeepCopy()
	a.DeletionTimestamp = &now
	f.update(a)
	f.waitIDs()

	// A new pod, then deleted.
	e := workerPod("llm", "e", "10.0.0.5")
	f.create(e)
	f.waitIDs("k8s.llm.e")
	waitMetric(t, "pdrouter_discovery_workers", f.w.metrics.workers, 1)
	if err := f.client.CoreV1().Pods("llm").Delete(context.Background(), "e", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitIDs()
	waitMetric(t, "deregistrations (b, a, e)", f.w.metrics.requests.WithLabelValues(opDeregister, resultOK), 3)
	waitMetric(t, "pdrouter_discovery_workers", f.w.metrics.workers, 0)
	if got := testutil.ToFloat64(f.w.metrics.requests.WithLabelValues(opRegister, resultRefused)); got != 0 {
		t.Errorf("the router refused %v registrations", got)
	}
}

func TestWatcherRefusesBadAnnotations(t *testing.T) {
	bad := workerPod("llm", "bad", "10.0.0.1")
	bad.Annotations[workerspec.AnnotationBlockSize] = "0x10"
	typo := workerPod("llm", "typo", "10.0.0.2")
	typo.Annotations["pdrouter.io/blocksize"] = "16"
	good := workerPod("llm", "good", "10.0.0.3")
	f := newFixture(t, []*corev1.Pod{bad, typo, good})
	f.start(WithNamespace("llm"))
	f.waitIDs("k8s.llm.good")
	refused := func(label string) float64 { return testutil.ToFloat64(f.w.metrics.refused.WithLabelValues(label)) }
	waitCount := func(label string, want float64) {
		t.Helper()
		waitMetric(t, "refused{annotation="+label+"}", f.w.metrics.refused.WithLabelValues(label), want)
	}
	waitCount(workerspec.AnnotationBlockSize, 1)
	waitCount(workerspec.Unknown, 1)

	// The same error again (an unrelated update) is not counted again.
	bad = bad.DeepCopy()
	bad.Labels["revision"] = "2"
	f.update(bad)
	// Fixing the annotation registers the pod.
	fixed := bad.DeepCopy()
	fixed.Annotations[workerspec.AnnotationBlockSize] = "32"
	time.Sleep(100 * time.Millisecond)
	f.update(fixed)
	ws := f.waitIDs("k8s.llm.bad", "k8s.llm.good")
	if ws["k8s.llm.bad"].BlockSize != 32 {
		t.Fatalf("block size %d, want 32", ws["k8s.llm.bad"].BlockSize)
	}
	if got := refused(workerspec.AnnotationBlockSize); got != 1 {
		t.Fatalf("refused{block-size} = %v after a repeat of the same error, want 1", got)
	}
	// Breaking a registered pod's annotations removes its worker.
	broken := fixed.DeepCopy()
	broken.Annotations[workerspec.AnnotationPool] = "both"
	f.update(broken)
	f.waitIDs("k8s.llm.good")
	waitCount(workerspec.AnnotationPool, 1)
}

func TestReconcileRemovesStaleWorkersItOwns(t *testing.T) {
	f := newFixture(t, []*corev1.Pod{workerPod("llm", "a", "10.0.0.1")})
	// Left over from an earlier run (its pod is gone), another namespace's,
	// and one registered by hand.
	f.register("k8s.llm.ghost")
	f.register("k8s.other.x")
	f.register("decode-manual")
	f.waitIDs("k8s.llm.ghost", "k8s.other.x", "decode-manual")

	f.start(WithNamespace("llm"))
	f.waitIDs("k8s.llm.a", "k8s.other.x", "decode-manual")
	waitMetric(t, "pdrouter_discovery_stale_removed_total", f.w.metrics.removed, 1)
	// One registration of the pod: the first reconcile ran before it and
	// did not take it for missing.
	waitMetric(t, "registrations", f.w.metrics.requests.WithLabelValues(opRegister, resultOK), 1)

	// Someone deletes the pod's worker by hand: the next reconcile
	// registers it again, although this process registered it before.
	req, _ := http.NewRequest(http.MethodDelete, f.url+"/v1/workers/k8s.llm.a", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	f.waitIDs("k8s.other.x", "decode-manual")
	if got := testutil.ToFloat64(f.w.metrics.requests.WithLabelValues(opRegister, resultOK)); got != 1 {
		t.Fatalf("%v registrations before the reconcile, want 1", got)
	}
	if err := f.w.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.waitIDs("k8s.llm.a", "k8s.other.x", "decode-manual")
	waitMetric(t, "registrations", f.w.metrics.requests.WithLabelValues(opRegister, resultOK), 2)
	if !f.w.Reconciled() {
		t.Fatal("Reconciled is false after reconciles that succeeded")
	}
}

func TestWatcherOfAllNamespaces(t *testing.T) {
	f := newFixture(t, []*corev1.Pod{workerPod("x", "a", "10.0.0.1"), workerPod("y", "a", "10.0.0.2")})
	f.register("k8s.z.ghost")
	f.register("manual")
	f.waitIDs("k8s.z.ghost", "manual")
	f.start()
	f.waitIDs("k8s.x.a", "k8s.y.a", "manual")
}

func TestNewRefusesBadOptions(t *testing.T) {
	router, err := NewRouter("http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset()
	for _, o := range []Option{WithNamespace("Not_A_Namespace"), WithSelector("a in ("), WithSelector(""),
		WithResync(time.Millisecond), WithIDPrefix("K8S.")} {
		if _, err := New(client, router, o); err == nil {
			t.Errorf("New accepted a bad option")
		}
	}
	if _, err := New(nil, router); err == nil {
		t.Error("New accepted a nil client")
	}
	// Two watchers on one registry: an error, not a panic.
	reg := prometheus.NewRegistry()
	if _, err := New(client, router, WithRegisterer(reg)); err != nil {
		t.Fatal(err)
	}
	if _, err := New(client, router, WithRegisterer(reg)); err == nil {
		t.Error("a second watcher registered the same metrics")
	}
}
