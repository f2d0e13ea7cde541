package deployments

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/twmb/franz-go/pkg/kgo"
	"sigs.k8s.io/yaml"
)

// syntheticMetrics are series Prometheus itself makes, not pdrouter.
var syntheticMetrics = map[string]bool{"up": true}

var promql = parser.NewParser(parser.Options{})

// metricNames returns the metric names an expression selects.
func metricNames(t *testing.T, where, expr string) []string {
	t.Helper()
	e, err := promql.ParseExpr(expr)
	if err != nil {
		t.Errorf("%s: PromQL %q: %v", where, expr, err)
		return nil
	}
	var names []string
	for _, ms := range parser.ExtractSelectors(e) {
		found := false
		for _, m := range ms {
			if m.Name == model.MetricNameLabel {
				names = append(names, m.Value)
				found = true
			}
		}
		if !found {
			t.Errorf("%s: a selector without a metric name in %q", where, expr)
		}
	}
	return names
}

// groupedBy reports whether expr aggregates metric by label.
func groupedBy(expr, metric, label string) bool {
	e, err := promql.ParseExpr(expr)
	if err != nil {
		return false
	}
	found := false
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if a, ok := n.(*parser.AggregateExpr); ok && !a.Without && slices.Contains(a.Grouping, label) && strings.Contains(a.Expr.String(), metric) {
			found = true
		}
		return nil
	})
	return found
}

var (
	liveOnce    sync.Once
	liveMetrics map[string]bool
	liveErr     error
)

// exposedMetrics starts `pdrouter dev` (embedded broker, ingest, router),
// drives it until every kind of series has a sample (workers, a decision,
// an undecodable record), and returns the metric names its /metrics serves,
// with the _bucket, _sum and _count series of histograms.
func exposedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	bin := pdrouterBinary(t)
	// A replica of each --load-deltas mode the dashboard shows: some
	// series exist in one mode only (snapshots' unsent shares).
	liveOnce.Do(func() {
		liveMetrics, liveErr = scrapeDev(bin)
		if liveErr != nil {
			return
		}
		var snapshots map[string]bool
		if snapshots, liveErr = scrapeDev(bin, "--load-deltas", "snapshots", "--replica-id", "dev-snapshots"); liveErr == nil {
			maps.Copy(liveMetrics, snapshots)
		}
	})
	if liveErr != nil {
		t.Fatal(liveErr)
	}
	return liveMetrics
}

func scrapeDev(bin string, extra ...string) (names map[string]bool, err error) {
	dir, err := os.MkdirTemp(tmpRoot, "dev-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, append([]string{"dev", "--kafka-port", "0", "--http-addr", "127.0.0.1:0", "--data-dir", dir,
		"--router-conditional-disagg", "--log-level", "warn"}, extra...)...)
	cmd.Env = cleanEnv()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if err != nil {
			err = fmt.Errorf("%w\npdrouter dev stderr:\n%s", err, stderr.String())
		}
	}()
	// `pdrouter dev` prints where the broker and the API listen.
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	var api, kafka string
	deadline := time.After(60 * time.Second)
	for api == "" || kafka == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				return nil, fmt.Errorf("pdrouter dev exited before it listened")
			}
			f := strings.Fields(l)
			if len(f) >= 2 && f[0] == "api" {
				api = f[1]
			}
			if len(f) >= 2 && f[0] == "kafka" {
				kafka = f[1]
			}
		case <-deadline:
			return nil, fmt.Errorf("pdrouter dev did not print its addresses within 60s")
		}
	}
	go func() {
		for range lines {
		}
	}()
	if err := waitReady(api, 60*time.Second); err != nil {
		return nil, err
	}
	after := map[string]map[string]int64{}
	for _, w := range []string{
		`{"worker_id":"d1","pool":"decode","model":"m","block_size":16,"total_kv_blocks":1000}`,
		`{"worker_id":"p1","pool":"prefill","model":"m","block_size":16}`,
	} {
		var resp struct {
			Offsets map[string]map[string]int64 `json:"offsets"`
		}
		if err := postJSON(api+"/v1/workers", w, http.StatusAccepted, &resp); err != nil {
			return nil, err
		}
		for tp, ps := range resp.Offsets {
			if after[tp] == nil {
				after[tp] = map[string]int64{}
			}
			maps.Copy(after[tp], ps)
		}
	}
	toks := make([]int, 40)
	for i := range toks {
		toks[i] = i + 1
	}
	body := fmt.Sprintf(`{"request_id":"deployments-smoke","token_ids":%s,"after":%s}`, jsonString(toks), jsonString(after))
	if err := postJSON(api+"/v1/route", body, http.StatusOK, nil); err != nil {
		return nil, err
	}
	// A record no pdrouter wrote: the replica counts it as invalid and skips it.
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafka))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = cl.ProduceSync(ctx, &kgo.Record{Topic: "kv-events", Key: []byte("d1"), Value: []byte("not a pdrouter record")}).FirstErr()
	cl.Close()
	if err != nil {
		return nil, fmt.Errorf("produce to the dev broker: %w", err)
	}
	for end := time.Now().Add(20 * time.Second); ; {
		names, err = scrape(api + "/metrics")
		if err != nil {
			return nil, err
		}
		if names["pdrouter_records_invalid_total"] && names["pdrouter_decisions_total"] {
			return names, nil
		}
		if time.Now().After(end) {
			return nil, fmt.Errorf("/metrics never showed the invalid record and the decision: %v", slices.Sorted(maps.Keys(names)))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func waitReady(api string, d time.Duration) error {
	end := time.Now().Add(d)
	for {
		resp, err := http.Get(api + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(end) {
			return fmt.Errorf("%s/readyz not 200 after %s (%v)", api, d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func postJSON(url, body string, want int, out any) error {
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		return fmt.Errorf("POST %s: %d %s", url, resp.StatusCode, raw)
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

func scrape(url string) (map[string]bool, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", url, err)
	}
	names := map[string]bool{}
	for name, f := range fams {
		if len(f.GetMetric()) == 0 {
			continue
		}
		names[name] = true
		if f.GetType() == dto.MetricType_HISTOGRAM || f.GetType() == dto.MetricType_SUMMARY {
			names[name+"_sum"], names[name+"_count"] = true, true
			if f.GetType() == dto.MetricType_HISTOGRAM {
				names[name+"_bucket"] = true
			}
		}
	}
	return names, nil
}

func loadAlerts(t *testing.T) *rulefmt.RuleGroups {
	t.Helper()
	// Strict (unknown fields are errors), every expression parsed, every
	// label and annotation template checked: what `promtool check rules` does.
	groups, errs := rulefmt.ParseFile(path("prometheus", "alerts.yaml"), false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Errorf("alerts.yaml: %v", err)
	}
	if groups == nil {
		t.FailNow()
	}
	return groups
}

func TestAlertRules(t *testing.T) {
	groups := loadAlerts(t)
	exposed := exposedMetrics(t)
	readme := string(readFile(t, path("README.md")))
	var all []string
	alerts := map[string]string{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			where := fmt.Sprintf("alerts.yaml %s/%s", g.Name, r.Alert)
			if r.Alert == "" {
				t.Errorf("%s: only alerting rules belong here", where)
				continue
			}
			if alerts[r.Alert] != "" {
				t.Errorf("%s: duplicate alert name", where)
			}
			alerts[r.Alert] = r.Expr
			for _, m := range metricNames(t, where, r.Expr) {
				all = append(all, m)
				if !exposed[m] && !syntheticMetrics[m] {
					t.Errorf("%s: metric %s is not in pdrouter's /metrics", where, m)
				}
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" && s != "info" {
				t.Errorf("%s: severity %q: want critical, warning or info", where, s)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: needs a summary and a description", where)
			}
			anchor := strings.ToLower(r.Alert)
			if !strings.HasSuffix(r.Annotations["runbook_url"], "deployments/README.md#"+anchor) {
				t.Errorf("%s: runbook_url %q: want deployments/README.md#%s", where, r.Annotations["runbook_url"], anchor)
			}
			if !regexp.MustCompile(`(?m)^### ` + r.Alert + `\s*$`).MatchString(readme) {
				t.Errorf("%s: deployments/README.md has no runbook heading \"### %s\"", where, r.Alert)
			}
		}
	}
	// What the alerts must cover.
	covers := func(what string, ok func(expr string) bool) {
		for _, e := range alerts {
			if ok(e) {
				return
			}
		}
		t.Errorf("no alert covers %s", what)
	}
	covers("consumer lag", func(e string) bool { return strings.Contains(e, "pdrouter_consumer_lag_records") })
	covers("KV events missing from decode workers", func(e string) bool { return strings.Contains(e, "pdrouter_kv_events_missing_workers") })
	covers("unhealthy workers", func(e string) bool { return strings.Contains(e, "pdrouter_workers_unhealthy") })
	covers("KV events of another block size than the registration", func(e string) bool {
		return strings.Contains(e, "pdrouter_kv_block_size_mismatch_workers")
	})
	covers("audit appends in flight", func(e string) bool { return strings.Contains(e, "pdrouter_audit_appends_in_flight") })
	covers("audit append failures", func(e string) bool { return strings.Contains(e, "pdrouter_audit_append_failures_total") })
	covers("audit append backlog", func(e string) bool { return strings.Contains(e, "pdrouter_audit_append_duration_seconds_bucket") })
	covers("input refused at a boundary", func(e string) bool { return strings.Contains(e, "pdrouter_rejected_total") })
	covers("decode KV busy", func(e string) bool { return strings.Contains(e, `reason="bypass_denied_decode_busy"`) })
	covers("decision error rate", func(e string) bool {
		return strings.Contains(e, `route="/v1/route"`) && strings.Contains(e, `code=~"5.."`)
	})
	t.Logf("%d alerts over %d metric selectors", len(alerts), len(all))
}

// The PrometheusRule of the Kubernetes base carries exactly alerts.yaml.
func TestPrometheusRuleMatchesAlerts(t *testing.T) {
	groups := loadAlerts(t)
	var pr monitoringv1.PrometheusRule
	if err := yaml.UnmarshalStrict(readFile(t, path("k8s", "base", "prometheusrule.yaml")), &pr); err != nil {
		t.Fatalf("prometheusrule.yaml: %v", err)
	}
	type flat struct {
		Group, Alert, Expr, For string
		Labels, Annotations     map[string]string
	}
	var want, got []flat
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			want = append(want, flat{g.Name, r.Alert, strings.TrimSpace(r.Expr), r.For.String(), r.Labels, r.Annotations})
		}
	}
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			f := "0s"
			if r.For != nil {
				d, err := model.ParseDuration(string(*r.For))
				if err != nil {
					t.Fatalf("prometheusrule.yaml %s: for %q", r.Alert, *r.For)
				}
				f = d.String()
			}
			got = append(got, flat{g.Name, r.Alert, strings.TrimSpace(r.Expr.String()), f, r.Labels, r.Annotations})
		}
	}
	if jsonString(want) != jsonString(got) {
		t.Errorf("k8s/base/prometheusrule.yaml differs from prometheus/alerts.yaml: regenerate it\nalerts.yaml: %s\nPrometheusRule: %s", jsonString(want), jsonString(got))
	}
}

// dashboard is the part of Grafana's dashboard model the test reads.
type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name    string          `json:"name"`
			Type    string          `json:"type"`
			Query   json.RawMessage `json:"query"`
			Current struct {
				Value any `json:"value"`
			} `json:"current"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	GridPos struct{ H, W, X, Y int } `json:"gridPos"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

var grafanaVarRe = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)(?::[a-z]+)?\}?`)

func TestDashboard(t *testing.T) {
	raw := readFile(t, path("grafana", "pdrouter-dashboard.json"))
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("pdrouter-dashboard.json does not load: %v", err)
	}
	if d.UID == "" || d.Title == "" || d.SchemaVersion < 36 || len(d.Panels) == 0 {
		t.Fatalf("dashboard: uid %q title %q schemaVersion %d panels %d", d.UID, d.Title, d.SchemaVersion, len(d.Panels))
	}
	exposed := exposedMetrics(t)
	vars := map[string]string{}
	var varQueries []string
	for _, v := range d.Templating.List {
		switch v.Type {
		case "custom":
			vars[v.Name] = fmt.Sprint(v.Current.Value)
		case "query":
			var q struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &q); err != nil {
				t.Errorf("variable %s: %v", v.Name, err)
			}
			varQueries = append(varQueries, q.Query)
			vars[v.Name] = ".*"
		case "datasource":
			vars[v.Name] = "prometheus"
		}
	}
	expand := func(s string) string {
		return grafanaVarRe.ReplaceAllStringFunc(s, func(m string) string {
			name := grafanaVarRe.FindStringSubmatch(m)[1]
			if strings.HasPrefix(name, "__") {
				return "5m" // $__rate_interval, $__interval, $__range
			}
			if v, ok := vars[name]; ok {
				return v
			}
			t.Errorf("dashboard uses undefined variable $%s", name)
			return m
		})
	}
	queried := map[string]bool{}
	var exprs []string
	ids := map[int]bool{}
	type cell struct{ x, y int }
	occupied := map[cell]string{}
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel %q: duplicate id %d", p.Title, p.ID)
			}
			ids[p.ID] = true
			if p.GridPos.W < 1 || p.GridPos.X+p.GridPos.W > 24 || p.GridPos.H < 1 {
				t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, p.GridPos)
			}
			for x := p.GridPos.X; x < p.GridPos.X+p.GridPos.W; x++ {
				for y := p.GridPos.Y; y < p.GridPos.Y+p.GridPos.H; y++ {
					if o, ok := occupied[cell{x, y}]; ok {
						t.Errorf("panels %q and %q overlap", o, p.Title)
						x, y = 1<<30, 1<<30
						continue
					}
					occupied[cell{x, y}] = p.Title
				}
			}
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: data source must be the ${datasource} variable", p.Title)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			refs := map[string]bool{}
			for _, tg := range p.Targets {
				if refs[tg.RefID] {
					t.Errorf("panel %q: duplicate refId %s", p.Title, tg.RefID)
				}
				refs[tg.RefID] = true
				e := expand(tg.Expr)
				exprs = append(exprs, e)
				for _, m := range metricNames(t, "panel "+p.Title, e) {
					queried[m] = true
				}
			}
		}
	}
	walk(d.Panels)
	labelValuesRe := regexp.MustCompile(`^label_values\((.+),\s*([a-z_]+)\)$`)
	for _, q := range varQueries {
		m := labelValuesRe.FindStringSubmatch(q)
		if m == nil {
			t.Errorf("variable query %q: want label_values(selector, label)", q)
			continue
		}
		for _, name := range metricNames(t, "variable "+q, expand(m[1])) {
			queried[name] = true
		}
	}
	for _, m := range slices.Sorted(maps.Keys(queried)) {
		if !exposed[m] {
			t.Errorf("dashboard queries %s, which pdrouter's /metrics does not serve", m)
		}
	}
	// What the dashboard must show.
	need := func(what string, ok bool) {
		if !ok {
			t.Errorf("dashboard lacks %s", what)
		}
	}
	anyExpr := func(f func(e string) bool) bool { return slices.ContainsFunc(exprs, f) }
	need("the decision mix by reason", anyExpr(func(e string) bool { return groupedBy(e, "pdrouter_decisions_total", "reason") }))
	need("effective ISL quantiles", anyExpr(func(e string) bool {
		return strings.Contains(e, "histogram_quantile") && strings.Contains(e, "pdrouter_effective_isl_tokens_bucket")
	}))
	need("the eff_isl_threshold line", anyExpr(func(e string) bool {
		return strings.HasPrefix(e, "vector(") && vars["eff_isl_threshold"] != "" && strings.Contains(e, vars["eff_isl_threshold"])
	}))
	need("lag", queried["pdrouter_consumer_lag_records"])
	need("apply rate", queried["pdrouter_statestore_applied_records_total"])
	need("workers and their load", queried["pdrouter_workers"] && queried["pdrouter_active_requests"] && queried["pdrouter_kv_events_missing_workers"])
	need("workers whose KV events have another block size", queried["pdrouter_kv_block_size_mismatch_workers"])
	need("load shares", queried["pdrouter_load_share_records_total"] && queried["pdrouter_statestore_share_unsent_workers"] &&
		queried["pdrouter_statestore_latency_samples_total"] && queried["pdrouter_statestore_replica_id_conflicts_total"] && queried["pdrouter_forwarded_events_total"])
	need("audit health", queried["pdrouter_audit_append_duration_seconds_bucket"] && queried["pdrouter_audit_append_failures_total"] && queried["pdrouter_audit_appends_in_flight"])
	t.Logf("%d panels query %d metrics", len(ids), len(queried))
}
