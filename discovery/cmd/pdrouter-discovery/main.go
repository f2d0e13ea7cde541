// Command pdrouter-discovery registers pdrouter workers from Kubernetes
// pods: it watches the pods that match --selector (in --namespace, or in
// all namespaces) and registers each Running and Ready one with the router
// replica at --router-url from its pdrouter.io/ annotations, and removes it
// when the pod goes. It runs in the cluster, with a ServiceAccount allowed
// to get, list and watch pods (deployments/k8s). Every flag has a PDR_
// environment variable (--router-url is PDR_ROUTER_URL); a flag given on
// the command line wins. See docs/discovery.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/pdrouter/pdrouter/discovery"
	"github.com/pdrouter/pdrouter/internal/envflags"
	"github.com/pdrouter/pdrouter/internal/logflags"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.LookupEnv, os.Stderr, inCluster))
}

// inCluster is the client of the cluster the process runs in, through its
// ServiceAccount.
func inCluster() (kubernetes.Interface, error) {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("in-cluster Kubernetes config (pdrouter-discovery runs in a pod): %w", err)
	}
	cfg.UserAgent = "pdrouter-discovery"
	return kubernetes.NewForConfig(cfg)
}

type options struct {
	routerURL, authToken, namespace, selector, idPrefix string
	metricsAddr, logLevel, logFormat                    string
	resync, routerTimeout                               time.Duration
}

func (o *options) bind(fs *pflag.FlagSet) {
	fs.StringVar(&o.routerURL, "router-url", "", "base URL of a router replica's HTTP API, e.g. http://pdrouter:8080 (required)")
	fs.StringVar(&o.authToken, "auth-token", "", "the router's --auth-token, sent as a bearer token (prefer the environment variable: flags show in the process list)")
	fs.DurationVar(&o.routerTimeout, "router-timeout", discovery.DefaultRouterTimeout, "bound of one request to the router")
	fs.StringVar(&o.namespace, "namespace", "", "namespace whose pods are watched; empty watches every namespace (needs a ClusterRole)")
	fs.StringVar(&o.selector, "selector", discovery.DefaultSelector, "label selector of the worker pods")
	fs.StringVar(&o.idPrefix, "id-prefix", discovery.DefaultIDPrefix, "first segment of the worker ids (<prefix>.<namespace>.<pod>); reconciling removes stale workers under it only")
	fs.DurationVar(&o.resync, "resync", discovery.DefaultResync, "period of the reconcile of the router's workers with the pods")
	fs.StringVar(&o.metricsAddr, "metrics-addr", ":9090", "address of /metrics, /healthz and /readyz; empty serves none")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", "json", "text or json")
}

// run is the command: 0 when ctx ends, 2 for a usage error, 1 for any
// other failure. newClient gives the Kubernetes client (tests pass a fake).
func run(ctx context.Context, args []string, lookup func(string) (string, bool), stderr io.Writer,
	newClient func() (kubernetes.Interface, error)) int {
	fs := pflag.NewFlagSet("pdrouter-discovery", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	o.bind(fs)
	envflags.Annotate(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return 2
	}
	usage := func(err error) int {
		fmt.Fprintf(stderr, "pdrouter-discovery: %v\n", err)
		return 2
	}
	if err := envflags.Apply(fs, lookup); err != nil {
		return usage(err)
	}
	if fs.NArg() > 0 {
		return usage(fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	log, err := logflags.New(stderr, o.logLevel, o.logFormat)
	if err != nil {
		return usage(err)
	}
	if o.routerURL == "" {
		return usage(errors.New("--router-url is required"))
	}
	router, err := discovery.NewRouter(o.routerURL, discovery.WithAuthToken(o.authToken), discovery.WithRouterTimeout(o.routerTimeout))
	if err != nil {
		return usage(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	client, err := newClient()
	if err != nil {
		log.Error("pdrouter-discovery: no Kubernetes client", "err", err)
		return 1
	}
	// client-go logs through klog: into the same handler, so that one
	// process writes one log format.
	klog.SetSlogLogger(log)
	w, err := discovery.New(client, router, discovery.WithNamespace(o.namespace), discovery.WithSelector(o.selector),
		discovery.WithResync(o.resync), discovery.WithIDPrefix(o.idPrefix), discovery.WithLogger(log), discovery.WithRegisterer(reg))
	if err != nil {
		return usage(err)
	}
	if o.metricsAddr != "" {
		srv, err := serveMetrics(o.metricsAddr, reg, w)
		if err != nil {
			log.Error("pdrouter-discovery: --metrics-addr", "err", err)
			return 1
		}
		log.Info("pdrouter-discovery: serving /metrics, /healthz and /readyz", "addr", srv.addr)
		defer srv.close()
	}
	if err := w.Run(ctx); err != nil {
		log.Error("pdrouter-discovery: stopped", "err", err)
		return 1
	}
	return 0
}

type metricsServer struct {
	addr  string
	close func()
}

// serveMetrics serves the metrics and the probes: /healthz answers while
// the process runs, /readyz once a reconcile succeeded.
func serveMetrics(addr string, g prometheus.Gatherer, w *discovery.Watcher) (*metricsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(rw http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(rw, "ok\n") })
	mux.HandleFunc("GET /readyz", func(rw http.ResponseWriter, _ *http.Request) {
		if !w.Reconciled() {
			http.Error(rw, "no reconcile with the router has succeeded yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(rw, "ok\n")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, MaxHeaderBytes: 16 << 10,
		ErrorLog: slog.NewLogLogger(slog.Default().Handler(), slog.LevelWarn)}
	go func() { _ = srv.Serve(ln) }()
	return &metricsServer{addr: ln.Addr().String(), close: func() { _ = srv.Close() }}, nil
}
