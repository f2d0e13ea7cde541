// Package deployments holds pdrouter's deployment files: the container image
// (docker/), the compose stack (compose/), Kubernetes manifests with
// kustomize (k8s/), Prometheus alert rules (prometheus/) and the Grafana
// dashboard (grafana/). Its tests validate them offline against the real
// parsers and the real binary; see README.md.
package deployments
