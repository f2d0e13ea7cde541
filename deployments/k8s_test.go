package deployments

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/kustomize/api/krusty"
	ktypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// imageUser is the USER of the Dockerfile's final stage; pods must run as it.
const imageUser = 65532

// rendered is the output of one kustomize build, decoded strictly into the
// Kubernetes (and Prometheus Operator) API types.
type rendered struct {
	name        string
	deployments map[string]*appsv1.Deployment
	jobs        map[string]*batchv1.Job
	services    map[string]*corev1.Service
	configMaps  map[string]*corev1.ConfigMap
	pdbs        map[string]*policyv1.PodDisruptionBudget
	hpas        map[string]*autoscalingv2.HorizontalPodAutoscaler
	monitors    map[string]*monitoringv1.ServiceMonitor
	rules       map[string]*monitoringv1.PrometheusRule
	namespaces  map[string]*corev1.Namespace
	accounts    map[string]*corev1.ServiceAccount
	roles       map[string]*rbacv1.Role
	bindings    map[string]*rbacv1.RoleBinding
	// discovery is the Deployment of pdrouter-discovery (the discovery
	// component), kept apart from the Deployments of the pdrouter image,
	// which every other check is about.
	discovery    map[string]*appsv1.Deployment
	metas        []metav1.ObjectMeta
	namespaceSet map[string]bool
}

// build runs kustomize in-process (the same library kubectl -k uses) and
// decodes every resource with unknown fields as errors.
func build(t *testing.T, dir string) *rendered {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	r := &rendered{
		name:        strings.TrimPrefix(dir, repoRoot+"/"),
		deployments: map[string]*appsv1.Deployment{}, jobs: map[string]*batchv1.Job{},
		services: map[string]*corev1.Service{}, configMaps: map[string]*corev1.ConfigMap{},
		pdbs: map[string]*policyv1.PodDisruptionBudget{}, hpas: map[string]*autoscalingv2.HorizontalPodAutoscaler{},
		monitors: map[string]*monitoringv1.ServiceMonitor{}, rules: map[string]*monitoringv1.PrometheusRule{},
		namespaces: map[string]*corev1.Namespace{}, accounts: map[string]*corev1.ServiceAccount{},
		roles: map[string]*rbacv1.Role{}, bindings: map[string]*rbacv1.RoleBinding{}, discovery: map[string]*appsv1.Deployment{},
		namespaceSet: map[string]bool{},
	}
	for _, res := range rm.Resources() {
		y, err := res.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		gvk := res.GetApiVersion() + "/" + res.GetKind()
		where := fmt.Sprintf("%s: %s %s", r.name, gvk, res.GetName())
		var meta *metav1.ObjectMeta
		switch gvk {
		case "apps/v1/Deployment":
			if res.GetName() == discoveryName {
				meta, err = decodeInto(y, r.discovery)
				break
			}
			meta, err = decodeInto(y, r.deployments)
		case "rbac.authorization.k8s.io/v1/Role":
			meta, err = decodeInto(y, r.roles)
		case "rbac.authorization.k8s.io/v1/RoleBinding":
			meta, err = decodeInto(y, r.bindings)
		case "batch/v1/Job":
			meta, err = decodeInto(y, r.jobs)
		case "v1/Service":
			meta, err = decodeInto(y, r.services)
		case "v1/ConfigMap":
			meta, err = decodeInto(y, r.configMaps)
		case "v1/ServiceAccount":
			meta, err = decodeInto(y, r.accounts)
		case "v1/Namespace":
			meta, err = decodeInto(y, r.namespaces)
		case "policy/v1/PodDisruptionBudget":
			meta, err = decodeInto(y, r.pdbs)
		case "autoscaling/v2/HorizontalPodAutoscaler":
			meta, err = decodeInto(y, r.hpas)
		case "monitoring.coreos.com/v1/ServiceMonitor":
			meta, err = decodeInto(y, r.monitors)
		case "monitoring.coreos.com/v1/PrometheusRule":
			meta, err = decodeInto(y, r.rules)
		default:
			t.Errorf("%s: unexpected kind (add it to the test if it is intended)", where)
			continue
		}
		if err != nil {
			t.Errorf("%s does not decode strictly into the API type: %v", where, err)
		}
		r.metas = append(r.metas, *meta)
		if gvk != "v1/Namespace" {
			r.namespaceSet[meta.Namespace] = true
		}
	}
	return r
}

// decodeInto decodes y strictly into a new API object of type T and files
// it in m by name. It returns the object's metadata, and the decoding
// error if any (the object is filed either way, as far as it decoded).
func decodeInto[T any, P interface {
	*T
	metav1.ObjectMetaAccessor
}](y []byte, m map[string]*T) (*metav1.ObjectMeta, error) {
	o := P(new(T))
	err := yaml.UnmarshalStrict(y, o)
	om := o.GetObjectMeta().(*metav1.ObjectMeta)
	m[om.Name] = (*T)(o)
	return om, err
}

func TestKustomizationsReferenceEveryFile(t *testing.T) {
	var dirs []string
	err := filepath.WalkDir(path("k8s"), func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Name() == "kustomization.yaml" {
			dirs = append(dirs, filepath.Dir(p))
		}
		return err
	})
	if err != nil || len(dirs) < 3 {
		t.Fatalf("kustomizations under deployments/k8s: %v %v", dirs, err)
	}
	for _, dir := range dirs {
		var k ktypes.Kustomization
		if err := yaml.UnmarshalStrict(readFile(t, filepath.Join(dir, "kustomization.yaml")), &k); err != nil {
			t.Errorf("%s/kustomization.yaml: %v", dir, err)
			continue
		}
		refs := map[string]bool{"kustomization.yaml": true}
		add := func(p string) {
			if !strings.Contains(p, "/") && !strings.HasPrefix(p, "..") {
				refs[p] = true
			}
			if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
				t.Errorf("%s/kustomization.yaml lists %s, which does not exist", dir, p)
			}
		}
		for _, p := range k.Resources {
			add(p)
		}
		for _, p := range k.Components {
			add(p)
		}
		for _, p := range k.Patches {
			if p.Path != "" {
				add(p.Path)
			}
		}
		for _, g := range k.ConfigMapGenerator {
			for _, p := range append(append([]string{}, g.EnvSources...), g.FileSources...) {
				add(p)
			}
		}
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if !e.IsDir() && !refs[e.Name()] {
				t.Errorf("%s/%s is not referenced by its kustomization.yaml: a manifest that is never applied", dir, e.Name())
			}
		}
	}
}

func TestKustomizeBase(t *testing.T) {
	r := build(t, path("k8s", "base"))
	checkRendered(t, r)
	if r.namespaceSet[""] != true || len(r.namespaceSet) != 1 {
		t.Errorf("base sets a namespace (%v): leave it to overlays", r.namespaceSet)
	}
}

func TestKustomizeExampleOverlay(t *testing.T) {
	r := build(t, path("k8s", "overlays", "example"))
	checkRendered(t, r)
	if len(r.namespaceSet) != 1 || !r.namespaceSet["pdrouter"] || r.namespaces["pdrouter"] == nil {
		t.Errorf("overlay: every resource in the pdrouter namespace, which it creates; got %v", r.namespaceSet)
	}
	for _, m := range r.metas {
		if m.Labels["release"] == "" {
			t.Errorf("overlay: %s lacks the release label kube-prometheus-stack selects by", m.Name)
		}
	}
	// SASL: the mechanism is set, so every process that talks to Kafka gets
	// the user and password from the Secret.
	for _, pod := range podsOf(r) {
		env := containerEnv(t, r, pod.where, pod.c)
		if env["PDR_KAFKA_SASL_MECHANISM"] != "scram-sha-512" || env["PDR_KAFKA_TLS"] != "true" {
			t.Errorf("%s: want SASL/SCRAM over TLS, got mechanism %q tls %q", pod.where, env["PDR_KAFKA_SASL_MECHANISM"], env["PDR_KAFKA_TLS"])
		}
		for _, v := range []string{"PDR_KAFKA_SASL_USER", "PDR_KAFKA_SASL_PASSWORD"} {
			ref := secretRef(pod.c, v)
			if ref == nil || ref.Name != "pdrouter-kafka-sasl" || (ref.Optional != nil && *ref.Optional) {
				t.Errorf("%s: %s must come from the Secret pdrouter-kafka-sasl (required), got %+v", pod.where, v, ref)
			}
		}
	}
}

// The cells overlays: the example overlay twice, in a namespace per cell,
// the router replicas of each started with their cell (PDR_CELL), and
// nothing else changed: every check of a deployment holds for each.
func TestKustomizeCellOverlays(t *testing.T) {
	for i := range 2 {
		r := build(t, path("k8s", "overlays", "cells", fmt.Sprintf("cell-%d", i)))
		checkRendered(t, r)
		ns := fmt.Sprintf("pdrouter-cell-%d", i)
		if len(r.namespaceSet) != 1 || !r.namespaceSet[ns] || r.namespaces[ns] == nil {
			t.Errorf("cell %d: every resource in namespace %s, which it creates; got %v", i, ns, r.namespaceSet)
		}
		for _, pod := range podsOf(r) {
			env := containerEnv(t, r, pod.where, pod.c)
			want := ""
			if strings.Contains(pod.where, "Deployment pdrouter") && !strings.Contains(pod.where, "ingest") {
				want = fmt.Sprintf("%d/2", i)
			}
			if env["PDR_CELL"] != want {
				t.Errorf("cell %d: %s has PDR_CELL %q, want %q", i, pod.where, env["PDR_CELL"], want)
			}
		}
	}
}

// The bootstrap component, applied over the example overlay: replicas join
// from a ready peer's snapshot through the Service.
func TestKustomizeBootstrapComponent(t *testing.T) {
	r := buildWith(t, path("k8s", "overlays", "example"), "pdrouter", path("k8s", "components", "bootstrap-from-peer"))
	checkRendered(t, r)
	d := r.deployments["pdrouter"]
	env := containerEnv(t, r, "pdrouter", &d.Spec.Template.Spec.Containers[0])
	from := env["PDR_BOOTSTRAP_FROM"]
	u, err := url.Parse(from)
	if err != nil || u.Scheme != "http" || u.Path != "/v1/state/snapshot" {
		t.Fatalf("PDR_BOOTSTRAP_FROM=%q: want http://<service>:<port>/v1/state/snapshot", from)
	}
	svc := r.services[u.Hostname()]
	if svc == nil {
		t.Fatalf("PDR_BOOTSTRAP_FROM=%q: no Service %q", from, u.Hostname())
	}
	if !selects(svc.Spec.Selector, d.Spec.Template.Labels) || strconv.Itoa(int(svc.Spec.Ports[0].Port)) != u.Port() {
		t.Errorf("PDR_BOOTSTRAP_FROM=%q: Service %s does not route port %s to the router pods", from, svc.Name, u.Port())
	}
	if _, ok := r.deployments["pdrouter-ingest"]; ok {
		ing := containerEnv(t, r, "ingest", &r.deployments["pdrouter-ingest"].Spec.Template.Spec.Containers[0])
		if _, ok := ing["PDR_BOOTSTRAP_FROM"]; ok {
			t.Errorf("the bootstrap component patched ingest too")
		}
	}
}

// The load-shares component, applied over the example overlay: the router
// replicas run --load-deltas snapshots, each under its own replica id (its
// pod's name), and nothing else is patched.
func TestKustomizeLoadSharesComponent(t *testing.T) {
	plain := build(t, path("k8s", "overlays", "example"))
	r := buildWith(t, path("k8s", "overlays", "example"), "pdrouter", path("k8s", "components", "load-shares"))
	checkRendered(t, r)
	for _, pod := range podsOf(r) {
		env, before := containerEnv(t, r, pod.where, pod.c), map[string]string{}
		for _, p := range podsOf(plain) {
			if strings.TrimPrefix(p.where, plain.name) == strings.TrimPrefix(pod.where, r.name) {
				before = containerEnv(t, plain, p.where, p.c)
			}
		}
		router := strings.HasSuffix(pod.where, "Deployment pdrouter")
		if router {
			if env["PDR_LOAD_DELTAS"] != "snapshots" {
				t.Errorf("%s: PDR_LOAD_DELTAS %q, want snapshots", pod.where, env["PDR_LOAD_DELTAS"])
			}
			var id *corev1.EnvVar
			for i := range pod.c.Env {
				if pod.c.Env[i].Name == "PDR_REPLICA_ID" {
					id = &pod.c.Env[i]
				}
			}
			if id == nil || id.ValueFrom == nil || id.ValueFrom.FieldRef == nil || id.ValueFrom.FieldRef.FieldPath != "metadata.name" {
				t.Errorf("%s: PDR_REPLICA_ID must be the pod's name, distinct in the group; got %+v", pod.where, id)
			}
			delete(env, "PDR_LOAD_DELTAS")
		}
		if fmt.Sprint(env) != fmt.Sprint(before) {
			t.Errorf("%s: the component changed more than the router's PDR_LOAD_DELTAS:\n got %v\nwant %v", pod.where, env, before)
		}
	}
}

// buildWith builds a kustomization of the resources base with the
// components in namespace ns, as listing the components in base's own
// kustomization (which sets ns) does.
func buildWith(t *testing.T, base, ns string, components ...string) *rendered {
	t.Helper()
	dir := t.TempDir()
	// Kustomize takes only relative paths to other kustomizations.
	rel := func(p string) string {
		r, err := filepath.Rel(dir, p)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	k := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: %s\nresources:\n  - %s\ncomponents:\n", ns, rel(base))
	for _, c := range components {
		k += "  - " + rel(c) + "\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	return build(t, dir)
}

type podContainer struct {
	where string
	spec  *corev1.PodSpec
	c     *corev1.Container
}

func podsOf(r *rendered) []podContainer {
	var out []podContainer
	for _, name := range sortedKeys(r.deployments) {
		s := &r.deployments[name].Spec.Template.Spec
		for i := range s.Containers {
			out = append(out, podContainer{r.name + ": Deployment " + name, s, &s.Containers[i]})
		}
	}
	for _, name := range sortedKeys(r.jobs) {
		s := &r.jobs[name].Spec.Template.Spec
		for i := range s.Containers {
			out = append(out, podContainer{r.name + ": Job " + name, s, &s.Containers[i]})
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// containerEnv resolves a container's environment as the kubelet does:
// envFrom ConfigMaps first, then env; values from fields or Secrets become
// placeholders of the right shape.
func containerEnv(t *testing.T, r *rendered, where string, c *corev1.Container) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef == nil {
			t.Errorf("%s: envFrom other than a ConfigMap", where)
			continue
		}
		cm := r.configMaps[ef.ConfigMapRef.Name]
		if cm == nil {
			t.Errorf("%s: envFrom ConfigMap %q is not in the build", where, ef.ConfigMapRef.Name)
			continue
		}
		for k, v := range cm.Data {
			env[k] = v
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil:
			env[e.Name] = "pod-name-0"
		case e.ValueFrom.SecretKeyRef != nil:
			env[e.Name] = "secret"
		default:
			t.Errorf("%s: env %s from an unexpected source", where, e.Name)
		}
	}
	return env
}

func secretRef(c *corev1.Container, name string) *corev1.SecretKeySelector {
	for _, e := range c.Env {
		if e.Name == name && e.ValueFrom != nil {
			return e.ValueFrom.SecretKeyRef
		}
	}
	return nil
}

func selects(selector, podLabels map[string]string) bool {
	return len(selector) > 0 && labels.SelectorFromSet(selector).Matches(labels.Set(podLabels))
}

// checkRendered checks what strict decoding cannot: that the pieces fit
// each other and pdrouter's CLI.
func checkRendered(t *testing.T, r *rendered) {
	t.Helper()
	for _, m := range r.metas {
		for _, e := range validation.IsDNS1123Subdomain(m.Name) {
			t.Errorf("%s: name %q: %s", r.name, m.Name, e)
		}
		for k, v := range m.Labels {
			for _, e := range append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...) {
				t.Errorf("%s: %s label %s=%s: %s", r.name, m.Name, k, v, e)
			}
		}
	}
	for _, name := range []string{"pdrouter", "pdrouter-ingest"} {
		if r.deployments[name] == nil {
			t.Fatalf("%s: no Deployment %s", r.name, name)
		}
	}
	if r.jobs["pdrouter-migrate"] == nil || r.services["pdrouter"] == nil || r.pdbs["pdrouter"] == nil ||
		r.hpas["pdrouter"] == nil || r.monitors["pdrouter"] == nil || r.rules["pdrouter"] == nil {
		t.Fatalf("%s: missing one of Job pdrouter-migrate, Service, PodDisruptionBudget, HorizontalPodAutoscaler, ServiceMonitor, PrometheusRule pdrouter", r.name)
	}
	images := map[string]bool{}
	commands := map[string]string{}
	for _, pc := range podsOf(r) {
		c := pc.c
		images[c.Image] = true
		if c.Image == "pdrouter" || !strings.Contains(c.Image, ":") || strings.HasSuffix(c.Image, ":latest") && !strings.HasSuffix(r.name, "base") {
			t.Errorf("%s: image %q: the kustomize images transformer must pin a tag (latest only in base)", pc.where, c.Image)
		}
		if len(c.Command) > 0 {
			t.Errorf("%s: command overrides the image's ENTRYPOINT (pdrouter): use args", pc.where)
		}
		command, flags := checkArgs(t, pc.where, c.Args)
		commands[pc.where] = command
		env := containerEnv(t, r, pc.where, c)
		checkEnv(t, pc.where, command, env)
		// Pod security: the image's non-root user, nothing writable but volumes.
		psc, sc := pc.spec.SecurityContext, c.SecurityContext
		if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != imageUser ||
			psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: pod must run as non-root user %d (the image's USER) with the RuntimeDefault seccomp profile (Pod Security \"restricted\")", pc.where, imageUser)
		}
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			t.Errorf("%s: container must have a read-only root, no privilege escalation, and drop ALL capabilities", pc.where)
		}
		if pc.spec.AutomountServiceAccountToken == nil || *pc.spec.AutomountServiceAccountToken {
			t.Errorf("%s: pdrouter never calls the Kubernetes API: do not mount a token", pc.where)
		}
		if pc.spec.ServiceAccountName != "" && r.accounts[pc.spec.ServiceAccountName] == nil {
			t.Errorf("%s: ServiceAccount %q is not in the build", pc.where, pc.spec.ServiceAccountName)
		}
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("%s: set cpu and memory requests and a memory limit (the HPA scales on cpu requests)", pc.where)
		}
		switch command {
		case "serve":
			checkRouterPod(t, r, pc, flags, env)
		case "ingest":
			if addr := effective(t, "ingest", "http-addr", flags, env); !strings.HasPrefix(addr, "0.0.0.0:") {
				t.Errorf("%s: ingest's --http-addr %q must listen on all interfaces for the ServiceMonitor", pc.where, addr)
			}
		}
	}
	if len(images) != 1 {
		t.Errorf("%s: every container runs the one pdrouter image, got %v", r.name, images)
	}
	if commands[r.name+": Job pdrouter-migrate"] != "migrate" || commands[r.name+": Deployment pdrouter"] != "serve" || commands[r.name+": Deployment pdrouter-ingest"] != "ingest" {
		t.Errorf("%s: commands %v: want the Job to run migrate, pdrouter to serve and pdrouter-ingest to ingest", r.name, commands)
	}
	job := r.jobs["pdrouter-migrate"]
	if rp := job.Spec.Template.Spec.RestartPolicy; rp != corev1.RestartPolicyNever && rp != corev1.RestartPolicyOnFailure {
		t.Errorf("%s: migrate Job restartPolicy %q", r.name, rp)
	}
	if job.Spec.BackoffLimit == nil || job.Spec.TTLSecondsAfterFinished == nil {
		t.Errorf("%s: migrate Job needs a backoffLimit and ttlSecondsAfterFinished (so the next apply runs it again)", r.name)
	}

	d := r.deployments["pdrouter"]
	pods := d.Spec.Template.Labels
	if !selects(d.Spec.Selector.MatchLabels, pods) {
		t.Errorf("%s: Deployment selector does not match its pod labels", r.name)
	}
	if d.Spec.Replicas != nil {
		t.Errorf("%s: Deployment pdrouter sets replicas: the HPA owns the count, and every apply would reset it", r.name)
	}
	if s := d.Spec.Strategy.RollingUpdate; s == nil || s.MaxUnavailable == nil || s.MaxUnavailable.IntValue() != 0 {
		t.Errorf("%s: roll with maxUnavailable 0: a new replica replays before it is ready", r.name)
	}
	svc := r.services["pdrouter"]
	if !selects(svc.Spec.Selector, pods) {
		t.Errorf("%s: Service pdrouter does not select the router pods", r.name)
	}
	for _, name := range sortedKeys(r.services) {
		s := r.services[name]
		var target *corev1.PodTemplateSpec
		for _, dd := range r.deployments {
			if selects(s.Spec.Selector, dd.Spec.Template.Labels) {
				target = &dd.Spec.Template
			}
		}
		if target == nil {
			t.Errorf("%s: Service %s selects no pods", r.name, name)
			continue
		}
		for _, p := range s.Spec.Ports {
			if !hasPort(target.Spec.Containers, p.TargetPort.String()) {
				t.Errorf("%s: Service %s targetPort %s is not a container port", r.name, name, p.TargetPort.String())
			}
		}
	}
	pdb := r.pdbs["pdrouter"]
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(pods)) {
		t.Errorf("%s: PodDisruptionBudget does not select the router pods", r.name)
	}
	hpa := r.hpas["pdrouter"]
	if ref := hpa.Spec.ScaleTargetRef; ref.Kind != "Deployment" || ref.Name != d.Name || ref.APIVersion != "apps/v1" {
		t.Errorf("%s: HPA scales %+v, not Deployment %s", r.name, ref, d.Name)
	}
	if hpa.Spec.MinReplicas == nil || *hpa.Spec.MinReplicas < 2 || hpa.Spec.MaxReplicas < *hpa.Spec.MinReplicas {
		t.Errorf("%s: HPA min replicas must be ≥ 2 (one may be disrupted, one may be replaying)", r.name)
	}
	if pdb.Spec.MaxUnavailable == nil || hpa.Spec.MinReplicas == nil || pdb.Spec.MaxUnavailable.IntValue() >= int(*hpa.Spec.MinReplicas) {
		t.Errorf("%s: PDB maxUnavailable must leave replicas up at the HPA minimum", r.name)
	}
	// The ServiceMonitor scrapes the router and ingest Services on a port they name.
	sm := r.monitors["pdrouter"]
	smSel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
	if err != nil {
		t.Fatalf("%s: ServiceMonitor selector: %v", r.name, err)
	}
	for _, name := range []string{"pdrouter", "pdrouter-ingest"} {
		s := r.services[name]
		if s == nil || !smSel.Matches(labels.Set(s.Labels)) {
			t.Errorf("%s: ServiceMonitor does not select Service %s", r.name, name)
			continue
		}
		for _, ep := range sm.Spec.Endpoints {
			if !slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port }) {
				t.Errorf("%s: ServiceMonitor endpoint port %q is not a port of Service %s", r.name, ep.Port, name)
			}
			if ep.Path != "/metrics" {
				t.Errorf("%s: ServiceMonitor path %q", r.name, ep.Path)
			}
		}
	}
}

func hasPort(cs []corev1.Container, name string) bool {
	for _, c := range cs {
		for _, p := range c.Ports {
			if p.Name == name || strconv.Itoa(int(p.ContainerPort)) == name {
				return true
			}
		}
	}
	return false
}

// checkRouterPod: probes on the API port, the store on an emptyDir, and a
// grace period that covers the preStop sleep and --shutdown-timeout.
func checkRouterPod(t *testing.T, r *rendered, pc podContainer, flags, env map[string]string) {
	t.Helper()
	c, spec := pc.c, pc.spec
	addr := effective(t, "serve", "http-addr", flags, env)
	if !strings.HasPrefix(addr, "0.0.0.0:") && !strings.HasPrefix(addr, ":") {
		t.Errorf("%s: --http-addr %q does not listen on the pod IP", pc.where, addr)
	}
	port := portOf(t, addr)
	portName := ""
	for _, p := range c.Ports {
		if int(p.ContainerPort) == port {
			portName = p.Name
		}
	}
	if portName == "" {
		t.Errorf("%s: no container port %d (--http-addr %s)", pc.where, port, addr)
	}
	probe := func(what string, p *corev1.Probe, path string) {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("%s: %s probe must be an HTTP GET of %s", pc.where, what, path)
			return
		}
		if p.HTTPGet.Path != path || (p.HTTPGet.Port.String() != portName && p.HTTPGet.Port.IntValue() != port) {
			t.Errorf("%s: %s probe gets %s on %s, want %s on the API port", pc.where, what, p.HTTPGet.Path, p.HTTPGet.Port.String(), path)
		}
	}
	probe("readiness", c.ReadinessProbe, "/readyz")
	probe("liveness", c.LivenessProbe, "/healthz")
	probe("startup", c.StartupProbe, "/healthz")
	if c.StartupProbe != nil && time.Duration(c.StartupProbe.PeriodSeconds*c.StartupProbe.FailureThreshold)*time.Second < 5*time.Minute {
		t.Errorf("%s: the startup probe must allow ≥ 5 min: the store opens (or a snapshot downloads) before HTTP listens", pc.where)
	}
	dataDir := effective(t, "serve", "data-dir", flags, env)
	var mounted string
	for _, m := range c.VolumeMounts {
		if m.MountPath == dataDir {
			mounted = m.Name
		}
	}
	okVol := false
	for _, v := range spec.Volumes {
		if v.Name == mounted && v.EmptyDir != nil && v.EmptyDir.SizeLimit != nil {
			okVol = true
		}
	}
	if !okVol {
		t.Errorf("%s: --data-dir %s must be an emptyDir with a sizeLimit", pc.where, dataDir)
	}
	shutdown := mustDuration(t, "--shutdown-timeout", effective(t, "serve", "shutdown-timeout", flags, env))
	var preStop time.Duration
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil {
		t.Errorf("%s: preStop must sleep (the Service must drop the pod before SIGTERM)", pc.where)
	} else {
		preStop = time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	}
	if spec.TerminationGracePeriodSeconds == nil {
		t.Fatalf("%s: no terminationGracePeriodSeconds", pc.where)
	}
	grace := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	if grace < preStop+shutdown+5*time.Second {
		t.Errorf("%s: terminationGracePeriodSeconds %s < preStop %s + --shutdown-timeout %s + 5s", pc.where, grace, preStop, shutdown)
	}
	if env["PDR_REPLICA_ID"] == "" {
		t.Errorf("%s: PDR_REPLICA_ID should name the pod (decision records carry it)", pc.where)
	}
	if readyLag, err := strconv.Atoi(effective(t, "serve", "ready-lag", flags, env)); err != nil || readyLag <= 0 {
		t.Errorf("%s: --ready-lag must be a positive bound", pc.where)
	}
}
