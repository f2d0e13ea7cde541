package deployments

import (
	"maps"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// discoveryName is the name of the discovery component's Deployment,
// ServiceAccount, Role and RoleBinding.
const discoveryName = "pdrouter-discovery"

// The discovery component over the example overlay: the router deployment
// passes every check as before, and the watcher gets exactly the access it
// needs (get, list and watch pods in its own namespace), reaches the router
// through its Service and is configured with flags pdrouter-discovery has.
func TestKustomizeDiscoveryComponent(t *testing.T) {
	r := buildWith(t, path("k8s", "overlays", "example"), "pdrouter", path("k8s", "components", "discovery"))
	checkRendered(t, r)
	d := r.discovery[discoveryName]
	if d == nil {
		t.Fatalf("no Deployment %s", discoveryName)
	}
	where := r.name + ": Deployment " + discoveryName
	if d.Namespace != "pdrouter" {
		t.Errorf("%s: namespace %q, want the overlay's", where, d.Namespace)
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
		t.Errorf("%s: one watcher per id prefix (replicas: 1)", where)
	}
	spec := &d.Spec.Template.Spec
	if !selects(d.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
		t.Errorf("%s: the selector does not match its pod labels", where)
	}
	if svc := r.services["pdrouter"]; selects(svc.Spec.Selector, d.Spec.Template.Labels) {
		t.Errorf("%s: the router Service would send API traffic to the watcher", where)
	}

	// RBAC: its own ServiceAccount, bound to a Role that reads pods only.
	sa := r.accounts[spec.ServiceAccountName]
	if spec.ServiceAccountName != discoveryName || sa == nil {
		t.Fatalf("%s: ServiceAccount %q is not the component's", where, spec.ServiceAccountName)
	}
	if spec.AutomountServiceAccountToken == nil || !*spec.AutomountServiceAccountToken {
		t.Errorf("%s: the watcher calls the Kubernetes API: it needs its token", where)
	}
	role := r.roles[discoveryName]
	if role == nil || len(role.Rules) != 1 {
		t.Fatalf("%s: want Role %s with one rule, got %+v", where, discoveryName, role)
	}
	rule := role.Rules[0]
	verbs := slices.Sorted(slices.Values(rule.Verbs))
	if !slices.Equal(rule.APIGroups, []string{""}) || !slices.Equal(rule.Resources, []string{"pods"}) ||
		!slices.Equal(verbs, []string{"get", "list", "watch"}) || len(rule.ResourceNames) != 0 || len(rule.NonResourceURLs) != 0 {
		t.Errorf("%s: Role rule %+v: want get, list and watch on pods only", where, rule)
	}
	rb := r.bindings[discoveryName]
	if rb == nil || rb.RoleRef != (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name}) ||
		len(rb.Subjects) != 1 || rb.Subjects[0].Kind != "ServiceAccount" || rb.Subjects[0].Name != sa.Name ||
		(rb.Subjects[0].Namespace != "" && rb.Subjects[0].Namespace != d.Namespace) {
		t.Errorf("%s: RoleBinding %+v does not bind Role %s to ServiceAccount %s", where, rb, role.Name, sa.Name)
	}

	// The container: the discovery image, pinned, run as the pdrouter
	// pods are (non-root, read-only, no capabilities).
	if len(spec.Containers) != 1 {
		t.Fatalf("%s: %d containers", where, len(spec.Containers))
	}
	c := &spec.Containers[0]
	if !strings.Contains(c.Image, "pdrouter-discovery:") || strings.HasSuffix(c.Image, ":latest") {
		t.Errorf("%s: image %q: the component pins the pdrouter-discovery image's tag", where, c.Image)
	}
	psc, sc := spec.SecurityContext, c.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != imageUser ||
		psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault ||
		sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil ||
		*sc.AllowPrivilegeEscalation || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Errorf("%s: run as non-root %d, RuntimeDefault seccomp, read-only root, no escalation, drop ALL", where, imageUser)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("%s: set cpu and memory requests and a memory limit", where)
	}

	// The environment: only flags the command has, the router reached
	// through its Service's port, the pod's own namespace.
	flags := discoveryFlags(t)
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		name, ok := strings.CutPrefix(e.Name, "PDR_")
		flag := strings.ReplaceAll(strings.ToLower(name), "_", "-")
		if !ok || !flags[flag] {
			t.Errorf("%s: %s is not the variable of a pdrouter-discovery flag (%v)", where, e.Name, slices.Sorted(maps.Keys(flags)))
		}
		env[e.Name] = e
	}
	u, err := url.Parse(env["PDR_ROUTER_URL"].Value)
	if err != nil || u.Scheme != "http" {
		t.Fatalf("%s: PDR_ROUTER_URL %q", where, env["PDR_ROUTER_URL"].Value)
	}
	svc := r.services[u.Hostname()]
	if svc == nil || !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return strconv.Itoa(int(p.Port)) == u.Port() }) ||
		!selects(svc.Spec.Selector, r.deployments["pdrouter"].Spec.Template.Labels) {
		t.Errorf("%s: PDR_ROUTER_URL %s is not a port of the router Service", where, u)
	}
	if ns := env["PDR_NAMESPACE"].ValueFrom; ns == nil || ns.FieldRef == nil || ns.FieldRef.FieldPath != "metadata.namespace" {
		t.Errorf("%s: PDR_NAMESPACE must be the pod's namespace (the Role grants no other)", where)
	}
	// The probes are on the metrics port, which the container declares.
	addr := env["PDR_METRICS_ADDR"].Value
	if !strings.HasPrefix(addr, "0.0.0.0:") {
		t.Errorf("%s: PDR_METRICS_ADDR %q must listen on the pod IP for the kubelet's probes", where, addr)
	}
	for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || !hasPort(spec.Containers, p.HTTPGet.Port.String()) {
			t.Errorf("%s: readiness and liveness probes over HTTP on a container port are required", where)
			continue
		}
		if !slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool {
			return cp.Name == p.HTTPGet.Port.String() && strconv.Itoa(int(cp.ContainerPort)) == strings.TrimPrefix(addr, "0.0.0.0:")
		}) {
			t.Errorf("%s: probe port %s is not PDR_METRICS_ADDR's port", where, p.HTTPGet.Port.String())
		}
	}
	if c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet != nil && c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("%s: readiness probe path %q, want /readyz", where, c.ReadinessProbe.HTTPGet.Path)
	}
}

// discoveryFlags reads the flag names of pdrouter-discovery from its source
// (the deployment checks do not build the discovery module: it would add
// client-go to this module's build).
func discoveryFlags(t *testing.T) map[string]bool {
	t.Helper()
	src := readFile(t, filepath.Join(repoRoot, "discovery", "cmd", "pdrouter-discovery", "main.go"))
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`fs\.\w+Var\(&o\.\w+, "([a-z-]+)"`).FindAllSubmatch(src, -1) {
		flags[string(m[1])] = true
	}
	if !flags["router-url"] || !flags["namespace"] {
		t.Fatalf("the flags of pdrouter-discovery were not found in its source: %v", flags)
	}
	return flags
}

// The discovery image: built from the discovery module, run as the same
// non-root user as the router's image on the same static base, with the
// watcher as its entry point and the metrics port the component probes.
func TestDiscoveryDockerfile(t *testing.T) {
	ins := parseDockerfileAt(t, "Dockerfile.discovery")
	last := ins[len(ins)-1].Stage
	final := map[string]string{}
	var build string
	for _, in := range ins {
		if in.Stage == last {
			final[in.Cmd] = in.Args
		} else if in.Cmd == "RUN" && strings.Contains(in.Args, "go build") {
			build = in.Args
		}
	}
	if !strings.Contains(build, "cd discovery") || !strings.Contains(build, "./cmd/pdrouter-discovery") {
		t.Errorf("the build stage must build ./cmd/pdrouter-discovery in the discovery module: %q", build)
	}
	if final["FROM"] != "gcr.io/distroless/static-debian12:nonroot" || final["USER"] != strconv.Itoa(imageUser)+":"+strconv.Itoa(imageUser) {
		t.Errorf("final stage: FROM %q USER %q; want the router image's base and user", final["FROM"], final["USER"])
	}
	if final["ENTRYPOINT"] != `["/usr/local/bin/pdrouter-discovery"]` || final["EXPOSE"] != "9090" {
		t.Errorf("ENTRYPOINT %s EXPOSE %s", final["ENTRYPOINT"], final["EXPOSE"])
	}
}
