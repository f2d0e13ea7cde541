package deployments

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"sigs.k8s.io/yaml"
)

// loadCompose loads the compose file with compose-go, the loader of the
// docker compose CLI: the compose-spec JSON schema (offline), interpolation,
// YAML anchors and merge keys, every profile enabled.
func loadCompose(t *testing.T) *types.Project {
	t.Helper()
	opts, err := cli.NewProjectOptions([]string{path("compose", "docker-compose.yaml")},
		cli.WithName("pdrouter"), cli.WithProfiles([]string{"*"}), cli.WithEnv([]string{}), cli.WithInterpolation(true),
		cli.WithResolvedPaths(true))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := opts.LoadProject(ctx)
	if err != nil {
		t.Fatalf("docker-compose.yaml: %v", err)
	}
	return p
}

func composeEnv(s types.ServiceConfig) map[string]string {
	env := map[string]string{}
	for k, v := range s.Environment {
		if v != nil {
			env[k] = *v
		}
	}
	return env
}

func TestComposeStack(t *testing.T) {
	p := loadCompose(t)
	dockerfile := path("docker", "Dockerfile")
	imageEnv := dockerfileEnv(t)
	byCommand := map[string][]string{}
	for _, name := range sortedKeys(p.Services) {
		s := p.Services[name]
		where := "compose service " + name
		if s.Build == nil {
			continue
		}
		// The pdrouter image, built from the repository root.
		if _, err := os.Stat(filepath.Join(s.Build.Context, "go.mod")); err != nil {
			t.Errorf("%s: build context %s is not the module root", where, s.Build.Context)
		}
		if df := s.Build.Dockerfile; df != dockerfile && filepath.Join(s.Build.Context, df) != dockerfile {
			t.Errorf("%s: builds %s, want %s", where, df, dockerfile)
		}
		if len(s.Entrypoint) > 0 {
			t.Errorf("%s: entrypoint overrides the image's pdrouter", where)
		}
		command, flags := checkArgs(t, where, s.Command)
		byCommand[command] = append(byCommand[command], name)
		env := composeEnv(s)
		full := map[string]string{}
		for k, v := range imageEnv {
			full[k] = v
		}
		for k, v := range env {
			full[k] = v
		}
		checkEnv(t, where, command, full)
		if !s.ReadOnly || !slices.Contains(s.CapDrop, "ALL") {
			t.Errorf("%s: run read-only with every capability dropped", where)
		}
		// Kafka is the compose service that listens there.
		for _, b := range strings.Split(effective(t, command, "brokers", flags, full), ",") {
			host, port, _ := strings.Cut(b, ":")
			k, ok := p.Services[host]
			if !ok || !strings.Contains(composeEnv(k)["KAFKA_LISTENERS"], "://:"+port) {
				t.Errorf("%s: broker %s is not a listener of a compose service", where, b)
			}
		}
		switch command {
		case "migrate":
			if s.Restart != "no" {
				t.Errorf("%s: a one-shot job must not restart", where)
			}
			if d, ok := s.DependsOn["kafka"]; !ok || d.Condition != types.ServiceConditionHealthy {
				t.Errorf("%s: must wait for Kafka to be healthy", where)
			}
		case "serve", "ingest":
			if d, ok := s.DependsOn["migrate"]; !ok || d.Condition != types.ServiceConditionCompletedSuccessfully {
				if !slices.Contains(s.Profiles, "join") {
					t.Errorf("%s: must start after migrate completed successfully", where)
				}
			}
			if addr := effective(t, command, "http-addr", flags, full); !strings.HasPrefix(addr, "0.0.0.0:") {
				t.Errorf("%s: --http-addr %s is not reachable from Prometheus", where, addr)
			}
		}
		if command == "serve" {
			shutdown := mustDuration(t, "--shutdown-timeout", effective(t, "serve", "shutdown-timeout", flags, full))
			if s.StopGracePeriod == nil || time.Duration(*s.StopGracePeriod) <= shutdown {
				t.Errorf("%s: stop_grace_period must exceed --shutdown-timeout %s", where, shutdown)
			}
			dataDir := effective(t, "serve", "data-dir", flags, full)
			if !slices.ContainsFunc(s.Tmpfs, func(m string) bool { return strings.HasPrefix(m, dataDir+":") || m == dataDir }) &&
				!slices.ContainsFunc(s.Volumes, func(v types.ServiceVolumeConfig) bool { return v.Target == dataDir }) {
				t.Errorf("%s: --data-dir %s is on the read-only root: mount a tmpfs or volume there", where, dataDir)
			}
			if from, ok := flags["bootstrap-from"]; ok {
				u, err := url.Parse(from)
				peer, found := p.Services[u.Hostname()]
				if err != nil || !found || u.Path != "/v1/state/snapshot" || slices.Contains(peer.Profiles, "join") ||
					portOf(t, effective(t, "serve", "http-addr", nil, composeEnv(peer))) != portOf(t, u.Host) {
					t.Errorf("%s: --bootstrap-from %s must name an always-on replica's API", where, from)
				}
			}
		}
	}
	var always []string
	for _, name := range byCommand["serve"] {
		if len(p.Services[name].Profiles) == 0 {
			always = append(always, name)
		}
	}
	if len(always) != 3 || len(byCommand["migrate"]) != 1 || len(byCommand["ingest"]) != 1 {
		t.Errorf("want three router replicas, one migrate job and one ingest; got %v (always on: %v)", byCommand, always)
	}
	kafka, ok := p.Services["kafka"]
	if !ok || !strings.HasPrefix(kafka.Image, "apache/kafka:4.") || !strings.Contains(composeEnv(kafka)["KAFKA_PROCESS_ROLES"], "controller") {
		t.Errorf("want an Apache Kafka 4.x KRaft service named kafka, got %q", kafka.Image)
	}
	if kafka.HealthCheck == nil || len(kafka.HealthCheck.Test) == 0 {
		t.Errorf("kafka needs a healthcheck: migrate waits for it")
	}
	for _, name := range []string{"prometheus", "grafana"} {
		s, ok := p.Services[name]
		if !ok {
			t.Errorf("no %s service", name)
			continue
		}
		for _, v := range s.Volumes {
			if v.Type == types.VolumeTypeBind {
				if _, err := os.Stat(v.Source); err != nil {
					t.Errorf("%s mounts %s, which does not exist", name, v.Source)
				}
			}
		}
	}
	checkPrometheusConfig(t, p, always)
	checkGrafanaProvisioning(t, p)
}

// mountSource returns the host file a service mounts at target.
func mountSource(t *testing.T, s types.ServiceConfig, target string) string {
	t.Helper()
	for _, v := range s.Volumes {
		if v.Target == target {
			return v.Source
		}
	}
	t.Fatalf("service %s mounts nothing at %s", s.Name, target)
	return ""
}

type promConfig struct {
	Global struct {
		ScrapeInterval     string `json:"scrape_interval"`
		EvaluationInterval string `json:"evaluation_interval"`
	} `json:"global"`
	RuleFiles     []string `json:"rule_files"`
	ScrapeConfigs []struct {
		JobName       string `json:"job_name"`
		MetricsPath   string `json:"metrics_path"`
		StaticConfigs []struct {
			Targets []string          `json:"targets"`
			Labels  map[string]string `json:"labels"`
		} `json:"static_configs"`
	} `json:"scrape_configs"`
}

// checkPrometheusConfig: the config Prometheus mounts scrapes every router
// and ingest on their --http-addr, and its rule_files pick up alerts.yaml.
func checkPrometheusConfig(t *testing.T, p *types.Project, routers []string) {
	t.Helper()
	prom := p.Services["prometheus"]
	var cfg promConfig
	if err := yaml.UnmarshalStrict(readFile(t, mountSource(t, prom, "/etc/prometheus/prometheus.yml")), &cfg); err != nil {
		t.Fatalf("prometheus.yml: %v", err)
	}
	ruleTarget := ""
	for _, v := range prom.Volumes {
		if filepath.Clean(v.Source) == path("prometheus", "alerts.yaml") {
			ruleTarget = v.Target
		}
	}
	matched := false
	for _, g := range cfg.RuleFiles {
		if ok, _ := filepath.Match(g, ruleTarget); ok && ruleTarget != "" {
			matched = true
		}
	}
	if !matched {
		t.Errorf("prometheus.yml rule_files %v do not load alerts.yaml (mounted at %q)", cfg.RuleFiles, ruleTarget)
	}
	scraped := map[string]string{}
	for _, sc := range cfg.ScrapeConfigs {
		if sc.MetricsPath != "/metrics" {
			t.Errorf("prometheus.yml job %s: metrics_path %q", sc.JobName, sc.MetricsPath)
		}
		for _, st := range sc.StaticConfigs {
			for _, target := range st.Targets {
				host, _, _ := strings.Cut(target, ":")
				s, ok := p.Services[host]
				if !ok {
					t.Errorf("prometheus.yml job %s: target %s is not a compose service", sc.JobName, target)
					continue
				}
				command := s.Command[0]
				addr := effective(t, command, "http-addr", nil, composeEnv(s))
				if portOf(t, addr) != portOf(t, target) {
					t.Errorf("prometheus.yml job %s: target %s, but %s listens on %s", sc.JobName, target, host, addr)
				}
				scraped[host] = sc.JobName
			}
		}
	}
	for _, r := range routers {
		if scraped[r] != "pdrouter" {
			t.Errorf("router %s is not scraped by job pdrouter (the job the alerts and dashboard expect)", r)
		}
	}
	if scraped["ingest"] != "pdrouter-ingest" {
		t.Errorf("ingest is not scraped by job pdrouter-ingest")
	}
}

// checkGrafanaProvisioning: the data source points at the prometheus
// service, and the dashboard provider's folder holds the mounted dashboard.
func checkGrafanaProvisioning(t *testing.T, p *types.Project) {
	t.Helper()
	g := p.Services["grafana"]
	var ds struct {
		APIVersion  int `json:"apiVersion"`
		Datasources []struct {
			Name      string         `json:"name"`
			UID       string         `json:"uid"`
			Type      string         `json:"type"`
			Access    string         `json:"access"`
			URL       string         `json:"url"`
			IsDefault bool           `json:"isDefault"`
			Editable  bool           `json:"editable"`
			JSONData  map[string]any `json:"jsonData"`
		} `json:"datasources"`
	}
	if err := yaml.UnmarshalStrict(readFile(t, mountSource(t, g, "/etc/grafana/provisioning/datasources/pdrouter.yaml")), &ds); err != nil {
		t.Fatalf("grafana datasources: %v", err)
	}
	if len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" {
		t.Fatalf("grafana: want one prometheus data source, got %+v", ds.Datasources)
	}
	u, err := url.Parse(ds.Datasources[0].URL)
	if err != nil || u.Hostname() != "prometheus" || u.Port() != "9090" {
		t.Errorf("grafana data source URL %q is not the prometheus service", ds.Datasources[0].URL)
	}
	var dp struct {
		APIVersion int `json:"apiVersion"`
		Providers  []struct {
			Name            string `json:"name"`
			Folder          string `json:"folder"`
			Type            string `json:"type"`
			DisableDeletion bool   `json:"disableDeletion"`
			AllowUIUpdates  bool   `json:"allowUiUpdates"`
			Options         struct {
				Path string `json:"path"`
			} `json:"options"`
		} `json:"providers"`
	}
	if err := yaml.UnmarshalStrict(readFile(t, mountSource(t, g, "/etc/grafana/provisioning/dashboards/pdrouter.yaml")), &dp); err != nil {
		t.Fatalf("grafana dashboard provider: %v", err)
	}
	found := false
	for _, v := range g.Volumes {
		if filepath.Clean(v.Source) == path("grafana", "pdrouter-dashboard.json") && len(dp.Providers) == 1 &&
			filepath.Dir(v.Target) == dp.Providers[0].Options.Path {
			found = true
		}
	}
	if !found {
		t.Errorf("grafana: the provider path %+v does not hold the mounted pdrouter-dashboard.json", dp.Providers)
	}
}
