package discovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/pdrouter/pdrouter/api/registration"
	"github.com/pdrouter/pdrouter/discovery/workerspec"
)

// Defaults of the options.
const (
	// DefaultResync is how often the watcher reconciles the router's
	// workers with the pods.
	DefaultResync = time.Minute
	// DefaultSelector selects the pods to register.
	DefaultSelector = "pdrouter.io/worker=true"
	// MinResync bounds WithResync from below: each reconcile lists every
	// worker of the router.
	MinResync = time.Second
)

// Option configures a Watcher.
type Option func(*config)

type config struct {
	namespace string
	selector  string
	resync    time.Duration
	idPrefix  string
	log       *slog.Logger
	reg       prometheus.Registerer
}

// WithNamespace watches one namespace; "" (the default) watches all, which
// needs a ClusterRole.
func WithNamespace(ns string) Option { return func(c *config) { c.namespace = ns } }

// WithSelector sets the label selector of the pods to register, in
// Kubernetes syntax (DefaultSelector).
func WithSelector(s string) Option { return func(c *config) { c.selector = s } }

// WithResync sets the period of the reconcile (DefaultResync, at least
// MinResync).
func WithResync(d time.Duration) Option { return func(c *config) { c.resync = d } }

// WithIDPrefix sets the first segment of the worker ids (DefaultIDPrefix).
// Two watchers that may see the same namespace need two prefixes: each
// removes the workers under its own prefix that it has no pod for.
func WithIDPrefix(p string) Option { return func(c *config) { c.idPrefix = p } }

// WithLogger sets the logger (slog.Default() by default).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.log = l } }

// WithRegisterer registers the pdrouter_discovery_* metrics there (none by
// default).
func WithRegisterer(reg prometheus.Registerer) Option { return func(c *config) { c.reg = reg } }

// Watcher registers the workers of pods with a router. Run runs it.
type Watcher struct {
	cfg      config
	selector labels.Selector
	router   *Router
	informer cache.SharedIndexInformer
	queue    workqueue.TypedRateLimitingInterface[string]
	metrics  *metrics
	// owned is OwnedPrefix of the configuration.
	owned string

	mu sync.Mutex
	// posted is what this process registered, by worker id: a sync that
	// would send the same again sends nothing.
	posted map[string]registration.Request
	// refused is the last error of each refused pod, by pod key: logged and
	// counted once per distinct error, not at every resync.
	refused map[string]string
	// reconciled is set after the first reconcile that succeeded.
	reconciled bool
}

// New returns a watcher of the pods client lists, registering with router.
func New(client kubernetes.Interface, router *Router, opts ...Option) (*Watcher, error) {
	cfg := config{selector: DefaultSelector, resync: DefaultResync, idPrefix: DefaultIDPrefix, log: slog.Default()}
	for _, o := range opts {
		o(&cfg)
	}
	if client == nil || router == nil {
		return nil, errors.New("discovery: a Kubernetes client and a router are required")
	}
	if cfg.namespace != "" {
		if errs := validation.IsDNS1123Label(cfg.namespace); len(errs) > 0 {
			return nil, fmt.Errorf("namespace %q: %v", cfg.namespace, errs)
		}
	}
	sel, err := labels.Parse(cfg.selector)
	if err != nil {
		return nil, fmt.Errorf("selector %q: %w", cfg.selector, err)
	}
	if sel.Empty() {
		return nil, errors.New("selector: an empty selector would register every pod; select the worker pods")
	}
	if cfg.resync < MinResync {
		return nil, fmt.Errorf("resync %v: at least %v", cfg.resync, MinResync)
	}
	if err := CheckIDPrefix(cfg.idPrefix); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.reg)
	if err != nil {
		return nil, err
	}
	w := &Watcher{
		cfg: cfg, selector: sel, router: router, metrics: m,
		owned:  OwnedPrefix(cfg.idPrefix, cfg.namespace),
		posted: map[string]registration.Request{}, refused: map[string]string{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "pdrouter-discovery"}),
	}
	// client-go's own pod informer, which also knows which clients cannot
	// stream the initial list (the fake clientset).
	w.informer = coreinformers.NewFilteredPodInformer(client, cfg.namespace, 0, cache.Indexers{},
		func(o *metav1.ListOptions) { o.LabelSelector = sel.String() })
	// The watcher reads labels, annotations, status and the deletion
	// timestamp: managed fields are most of a pod's bytes and none of that.
	if err := w.informer.SetTransform(stripManagedFields); err != nil {
		return nil, err
	}
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			w.queue.Add(key)
		}
	}
	if _, err := w.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}); err != nil {
		return nil, err
	}
	return w, nil
}

func stripManagedFields(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// Run watches until ctx ends: it waits for the informer's first list,
// reconciles, then registers and removes workers as pods change and
// reconciles every resync period. It returns nil when ctx ends, or an error
// if the informer never synced.
func (w *Watcher) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		w.queue.ShutDown()
		wg.Wait()
	}()
	wg.Go(func() { w.informer.RunWithContext(ctx) })
	w.cfg.log.Info("discovery: watching pods", "namespace", nsLabel(w.cfg.namespace), "selector", w.selector.String(),
		"id_prefix", w.owned, "resync", w.cfg.resync)
	if !cache.WaitForCacheSync(ctx.Done(), w.informer.HasSynced) {
		if ctx.Err() != nil {
			return nil
		}
		return errors.New("discovery: the pod informer never synced")
	}
	w.cfg.log.Info("discovery: pod list synced", "pods", len(w.informer.GetStore().ListKeys()))
	// The first reconcile runs before any sync: otherwise it could read
	// the router's list before the first registrations are applied, take
	// them for missing and send each of them a second time.
	w.reconcileLogged(ctx)
	wg.Go(func() {
		for w.processNext(ctx) {
		}
	})
	t := time.NewTicker(w.cfg.resync)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			w.reconcileLogged(ctx)
		}
	}
}

// Reconciled reports whether a reconcile has succeeded: the router's
// workers then reflect the pods (the binary's readiness).
func (w *Watcher) Reconciled() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.reconciled
}

func nsLabel(ns string) string {
	if ns == "" {
		return "(all)"
	}
	return ns
}

// processNext syncs one pod key; false once the queue is shut down. A
// failed sync is retried with the queue's backoff; a panic in a sync is
// logged and retried the same way, never crossing out of the watcher.
func (w *Watcher) processNext(ctx context.Context) bool {
	key, quit := w.queue.Get()
	if quit {
		return false
	}
	defer w.queue.Done(key)
	err := func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("panic: %v", p)
			}
		}()
		return w.sync(ctx, key)
	}()
	if err == nil || ctx.Err() != nil {
		w.queue.Forget(key)
		return true
	}
	w.cfg.log.Warn("discovery: sync failed, retrying", "pod", key, "retries", w.queue.NumRequeues(key), "err", err)
	w.queue.AddRateLimited(key)
	return true
}

// desired is the registration a pod should have, or nil: the pod is gone,
// does not match, is not eligible, or was refused (which it logs and
// counts once per distinct error).
func (w *Watcher) desired(key string, pod *corev1.Pod) *registration.Request {
	if pod == nil || !w.selector.Matches(labels.Set(pod.Labels)) ||
		(w.cfg.namespace != "" && pod.Namespace != w.cfg.namespace) || !Eligible(pod) {
		w.mu.Lock()
		delete(w.refused, key)
		w.mu.Unlock()
		return nil
	}
	r, err := workerspec.Parse(pod.Annotations, pod.Status.PodIP, WorkerID(w.cfg.idPrefix, pod.Namespace, pod.Name))
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil {
		delete(w.refused, key)
		return &r
	}
	if w.refused[key] != err.Error() {
		w.refused[key] = err.Error()
		ae := &workerspec.AnnotationError{Annotation: workerspec.Pod}
		errors.As(err, &ae)
		w.metrics.refused.WithLabelValues(ae.Annotation).Inc()
		w.cfg.log.Warn("discovery: pod refused, not registered", "pod", key, "err", err)
	}
	return nil
}

// podOf returns the cached pod of key, nil when there is none.
func (w *Watcher) podOf(key string) (*corev1.Pod, error) {
	obj, exists, err := w.informer.GetIndexer().GetByKey(key)
	if err != nil || !exists {
		return nil, err
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, fmt.Errorf("cache holds a %T for %s", obj, key)
	}
	return pod, nil
}

// sync brings the router's registration of one pod to what the pod says.
func (w *Watcher) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil // not a key this watcher made: nothing to retry
	}
	pod, err := w.podOf(key)
	if err != nil {
		return err
	}
	id := WorkerID(w.cfg.idPrefix, ns, name)
	want := w.desired(key, pod)
	w.mu.Lock()
	have, had := w.posted[id]
	w.mu.Unlock()
	if want == nil {
		if !had {
			return nil
		}
		return w.remove(ctx, id, "pod gone or not ready")
	}
	if had && sameRequest(have, *want) {
		return nil
	}
	err = w.router.Register(ctx, *want)
	w.metrics.request(opRegister, err)
	if err != nil {
		if isPermanent(err) {
			// The router refuses this registration as it is: retrying
			// cannot help until the pod changes (an update syncs again).
			w.cfg.log.Error("discovery: the router refused the registration", "pod", key, "worker_id", id, "err", err)
			return nil
		}
		return err
	}
	w.mu.Lock()
	w.posted[id] = *want
	w.metrics.workers.Set(float64(len(w.posted)))
	w.mu.Unlock()
	w.cfg.log.Info("discovery: registered", "pod", key, "worker_id", id, "pool", want.Pool, "model", want.Model, "http_url", want.HTTPURL)
	return nil
}

// remove deregisters a worker and forgets it.
func (w *Watcher) remove(ctx context.Context, id, why string) error {
	gone, err := w.router.Deregister(ctx, id)
	w.metrics.request(opDeregister, err)
	if err != nil && !isPermanent(err) {
		return err
	}
	w.mu.Lock()
	delete(w.posted, id)
	w.metrics.workers.Set(float64(len(w.posted)))
	w.mu.Unlock()
	if err != nil {
		w.cfg.log.Error("discovery: the router refused the deregistration", "worker_id", id, "err", err)
		return nil
	}
	w.cfg.log.Info("discovery: deregistered", "worker_id", id, "why", why, "was_registered", gone)
	return nil
}

func (w *Watcher) reconcileLogged(ctx context.Context) {
	if err := w.Reconcile(ctx); err != nil {
		w.metrics.reconciles.WithLabelValues(resultError).Inc()
		if ctx.Err() == nil {
			w.cfg.log.Warn("discovery: reconcile failed; retried at the next resync", "err", err)
		}
		return
	}
	w.metrics.reconciles.WithLabelValues(resultOK).Inc()
	w.mu.Lock()
	w.reconciled = true
	w.mu.Unlock()
}

// Reconcile removes the router's workers under this watcher's id prefix
// that no eligible pod has, and queues every cached pod for a sync; a pod
// whose worker the router lacks is registered again even if this process
// sent the same registration before (someone deleted it, or the router's
// log was reset). The router's list is read before the pods, so a worker
// registered between the two reads is never taken for a stale one. Runs
// at start and every resync period; safe beside the event-driven syncs.
func (w *Watcher) Reconcile(ctx context.Context) error {
	onRouter, err := w.router.WorkerIDs(ctx, w.owned)
	w.metrics.request(opList, err)
	if err != nil {
		return err
	}
	want := map[string]string{} // worker id → pod key
	keys := w.informer.GetStore().ListKeys()
	slices.Sort(keys)
	for _, key := range keys {
		pod, err := w.podOf(key)
		if err != nil {
			return err
		}
		if w.desired(key, pod) != nil {
			want[WorkerID(w.cfg.idPrefix, pod.Namespace, pod.Name)] = key
		}
	}
	var errs []error
	for _, id := range slices.Sorted(maps.Keys(onRouter)) {
		if _, ok := want[id]; ok {
			continue
		}
		if err := w.remove(ctx, id, "no eligible pod has this id"); err != nil {
			errs = append(errs, err)
			continue
		}
		w.metrics.removed.Inc()
	}
	w.mu.Lock()
	for id := range want {
		if !onRouter[id] {
			delete(w.posted, id)
		}
	}
	w.mu.Unlock()
	for _, key := range keys {
		w.queue.Add(key)
	}
	return errors.Join(errs...)
}

func sameRequest(a, b registration.Request) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && string(ja) == string(jb)
}

func isPermanent(err error) bool {
	var re *RouterError
	return errors.As(err, &re) && re.Permanent()
}

func resultOf(err error) string {
	switch {
	case err == nil:
		return resultOK
	case isPermanent(err):
		return resultRefused
	}
	return resultError
}
