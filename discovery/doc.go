// Package discovery registers pdrouter workers from Kubernetes pods.
//
// A Watcher keeps a client-go shared informer on the pods that match a label
// selector (in one namespace or in all) and turns each pod that is Running
// and Ready, has an IP and carries valid pdrouter.io/ annotations into a
// worker registration, sent to a router replica's HTTP API
// (POST /v1/workers); a pod that is deleted, stops being Ready or starts
// terminating is deregistered (DELETE /v1/workers/{id}). A new pod IP is a
// new registration: the last registration of an id wins.
//
// The worker id is derived from the pod's namespace and name alone
// (WorkerID), so a restarted watcher finds its own workers again: every id it
// owns starts with its id prefix and the namespace it watches, and a
// reconcile, at start and every resync period, removes the router's workers
// under that prefix that no longer have an eligible pod and registers the
// pods the router lacks. Workers registered by hand under other ids are never
// touched.
//
// Annotations are input from whoever can create pods in the watched
// namespaces: every value is checked against a named limit (workerspec),
// a refused pod is never registered, is logged once per distinct error and
// counted in pdrouter_discovery_refused_total{annotation}.
//
// The package lives in a Go module of its own so that the router does not
// depend on client-go. The docs are docs/discovery.md.
package discovery
