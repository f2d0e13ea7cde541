// Package deployments holds pdrouter's deployment files: the container image
// (docker/), the compose stack (compose/), Kubernetes manifests with
// kustomize (k8s/), Prometheus alert rules (prometheus/) and the Grafana
// dashboard (grafana/). Its tests validate them offline against the real
// parsers and the real binary; see README.md.
//
// It is a Go module of its own (go.mod here, the product's module through a
// replace of ../): the parsers it validates with (Prometheus, kustomize, the
// Kubernetes API types, compose-go) are large and used by nothing else, so
// the product's module, its builds and its tests stay without them.
package deployments
