package workerspec

import (
	"errors"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/pdrouter/pdrouter/events"
)

// valid is a valid set of annotations with the edits of ann ("<absent>"
// removes a key).
func valid(ann map[string]string) map[string]string {
	a := map[string]string{
		AnnotationPool: "decode", AnnotationModel: "llama-3-70b", AnnotationBlockSize: "16",
		AnnotationHTTPPort: "8000", AnnotationKVEventsPort: "5557",
	}
	for k, v := range ann {
		if v == "<absent>" {
			delete(a, k)
			continue
		}
		a[k] = v
	}
	return a
}

func TestAnnotationsSorted(t *testing.T) {
	if !slices.IsSorted(annotations) {
		t.Fatalf("annotations must be sorted for BinarySearch: %v", annotations)
	}
}

func TestParseBuildsEndpointsFromThePodIP(t *testing.T) {
	r, err := Parse(valid(map[string]string{
		AnnotationEngine: "VLLM", AnnotationTotalKVBlocks: "0", AnnotationMaxNumBatchedTokens: "8192",
		AnnotationDPSize: "2", AnnotationKVReplayPort: "5558", AnnotationKVEventsTopic: "kv",
		AnnotationMetricsPort: "9100", AnnotationMetricsPath: "/custom/metrics",
	}), "10.1.2.3", "k8s.ns.p")
	if err != nil {
		t.Fatal(err)
	}
	if r.WorkerID != "k8s.ns.p" || r.Pool != "decode" || r.Model != "llama-3-70b" || r.BlockSize != 16 || r.Engine != "vllm" ||
		r.DPSize != 2 || r.KVEventsTopic != "kv" {
		t.Fatalf("fields: %+v", r)
	}
	if r.TotalKVBlocks == nil || *r.TotalKVBlocks != 0 || r.MaxNumBatchedTokens == nil || *r.MaxNumBatchedTokens != 8192 {
		t.Fatalf("capacity: an annotated 0 is kept apart from absent: %+v", r)
	}
	if r.HTTPURL != "http://10.1.2.3:8000" || r.KVEventsEndpoint != "tcp://10.1.2.3:5557" ||
		r.KVReplayEndpoint != "tcp://10.1.2.3:5558" || r.MetricsURL != "http://10.1.2.3:9100/custom/metrics" {
		t.Fatalf("endpoints: %+v", r)
	}
	// IPv6, metrics on the HTTP port by default, capacity absent.
	r, err = Parse(valid(nil), "fd00::5", "k8s.ns.p")
	if err != nil {
		t.Fatal(err)
	}
	if r.HTTPURL != "http://[fd00::5]:8000" || r.KVEventsEndpoint != "tcp://[fd00::5]:5557" || r.MetricsURL != "http://[fd00::5]:8000/metrics" ||
		r.TotalKVBlocks != nil || r.KVReplayEndpoint != "" {
		t.Fatalf("IPv6 pod: %+v", r)
	}
	// No port: no URL at all.
	r, err = Parse(valid(map[string]string{AnnotationHTTPPort: "<absent>", AnnotationKVEventsPort: "<absent>"}), "10.0.0.1", "k8s.ns.p")
	if err != nil || r.HTTPURL != "" || r.MetricsURL != "" || r.KVEventsEndpoint != "" {
		t.Fatalf("no ports: %+v, %v", r, err)
	}
}

// TestParseRefuses names the annotation at fault for each kind of
// bad value: the label of pdrouter_discovery_refused_total.
func TestParseRefuses(t *testing.T) {
	long := strings.Repeat("m", MaxAnnotationValueLen+1)
	for _, tc := range []struct {
		name, ip string
		ann      map[string]string
		want     string // the refused annotation
		msg      string // in the error
	}{
		{"missing pool", "10.0.0.1", map[string]string{AnnotationPool: "<absent>"}, AnnotationPool, "required"},
		{"bad pool", "10.0.0.1", map[string]string{AnnotationPool: "both"}, AnnotationPool, `"both"`},
		{"missing model", "10.0.0.1", map[string]string{AnnotationModel: "<absent>"}, AnnotationModel, "required"},
		{"model too long", "10.0.0.1", map[string]string{AnnotationModel: long}, AnnotationModel, "MaxAnnotationValueLen"},
		{"unknown engine", "10.0.0.1", map[string]string{AnnotationEngine: "tgi"}, AnnotationEngine, "tgi"},
		{"missing block size", "10.0.0.1", map[string]string{AnnotationBlockSize: "<absent>"}, AnnotationBlockSize, "required"},
		{"block size 0", "10.0.0.1", map[string]string{AnnotationBlockSize: "0"}, AnnotationBlockSize, "[1, 65536]"},
		{"block size over", "10.0.0.1", map[string]string{AnnotationBlockSize: "65537"}, AnnotationBlockSize, "[1, 65536]"},
		{"block size signed", "10.0.0.1", map[string]string{AnnotationBlockSize: "+16"}, AnnotationBlockSize, "decimal"},
		{"block size hex", "10.0.0.1", map[string]string{AnnotationBlockSize: "0x10"}, AnnotationBlockSize, "decimal"},
		{"block size spaces", "10.0.0.1", map[string]string{AnnotationBlockSize: " 16"}, AnnotationBlockSize, "decimal"},
		{"total blocks huge", "10.0.0.1", map[string]string{AnnotationTotalKVBlocks: "18446744073709551616"}, AnnotationTotalKVBlocks, "decimal"},
		{"total blocks over limit", "10.0.0.1", map[string]string{AnnotationTotalKVBlocks: "1099511627777"}, AnnotationTotalKVBlocks, "1099511627776"},
		{"batched tokens negative", "10.0.0.1", map[string]string{AnnotationMaxNumBatchedTokens: "-1"}, AnnotationMaxNumBatchedTokens, "decimal"},
		{"dp size over", "10.0.0.1", map[string]string{AnnotationDPSize: "1025"}, AnnotationDPSize, "1024"},
		{"port 0", "10.0.0.1", map[string]string{AnnotationHTTPPort: "0"}, AnnotationHTTPPort, "[1, 65535]"},
		{"port over", "10.0.0.1", map[string]string{AnnotationKVEventsPort: "65536"}, AnnotationKVEventsPort, "[1, 65535]"},
		{"port named", "10.0.0.1", map[string]string{AnnotationKVReplayPort: "zmq"}, AnnotationKVReplayPort, "decimal"},
		{"metrics port empty", "10.0.0.1", map[string]string{AnnotationMetricsPort: ""}, AnnotationMetricsPort, "decimal"},
		{"topic too long", "10.0.0.1", map[string]string{AnnotationKVEventsTopic: strings.Repeat("t", events.MaxTopicLen+1)}, AnnotationKVEventsTopic, "MaxTopicLen"},
		{"metrics path relative", "10.0.0.1", map[string]string{AnnotationMetricsPath: "metrics"}, AnnotationMetricsPath, "absolute"},
		{"metrics path query", "10.0.0.1", map[string]string{AnnotationMetricsPath: "/metrics?x=1"}, AnnotationMetricsPath, "'?'"},
		{"metrics path escape", "10.0.0.1", map[string]string{AnnotationMetricsPath: "/%2e%2e/admin"}, AnnotationMetricsPath, "'%'"},
		{"metrics path dotdot", "10.0.0.1", map[string]string{AnnotationMetricsPath: "/a/../admin"}, AnnotationMetricsPath, ".."},
		{"metrics path at", "10.0.0.1", map[string]string{AnnotationMetricsPath: "@evil/x"}, AnnotationMetricsPath, "absolute"},
		{"metrics path too long", "10.0.0.1", map[string]string{AnnotationMetricsPath: "/" + strings.Repeat("a", MaxMetricsPathLen)}, AnnotationMetricsPath, "MaxMetricsPathLen"},
		{"misspelt key", "10.0.0.1", map[string]string{AnnotationPrefix + "blocksize": "16"}, Unknown, "not a known annotation"},
		{"no IP", "", nil, Pod, "not a unicast"},
		{"bad IP", "10.0.0.300", nil, Pod, "not a unicast"},
		{"unspecified IP", "0.0.0.0", nil, Pod, "not a unicast"},
		{"zoned IP", "fe80::1%eth0", nil, Pod, "not a unicast"},
		{"multicast IP", "224.0.0.1", nil, Pod, "not a unicast"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(valid(tc.ann), tc.ip, "k8s.ns.p")
			var ae *AnnotationError
			if !errors.As(err, &ae) {
				t.Fatalf("want an *AnnotationError, got %v", err)
			}
			if ae.Annotation != tc.want || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("refused %q (%v); want %q with %q in the message", ae.Annotation, err, tc.want, tc.msg)
			}
		})
	}
	// Keys outside the prefix are the pod's own business.
	if _, err := Parse(valid(map[string]string{"example.com/blocksize": "x"}), "10.0.0.1", "k8s.ns.p"); err != nil {
		t.Fatalf("a foreign annotation refused the pod: %v", err)
	}
	// An id the API would refuse is refused here, on the pod.
	_, err := Parse(valid(nil), "10.0.0.1", "k8s.ns.a b")
	var ae *AnnotationError
	if !errors.As(err, &ae) || ae.Annotation != Pod {
		t.Fatalf("id with a space: %v", err)
	}
}

// FuzzParse: whatever the annotations and the IP, no panic, and a
// registration that passes holds values the API's bounds accept and URLs
// whose host is the pod's IP.
func FuzzParse(f *testing.F) {
	f.Add("decode", "m", "16", "8000", "5557", "/metrics", "10.0.0.1", "vllm")
	f.Add("prefill", "m", "65536", "65535", "1", "/a/b", "fd00::1", "")
	f.Add("x", "", "0x10", "-1", "99999", "/..", "::", "tgi")
	f.Fuzz(func(t *testing.T, pool, model, bs, httpPort, kvPort, path, ip, engine string) {
		pod := valid(map[string]string{AnnotationPool: pool, AnnotationModel: model, AnnotationBlockSize: bs,
			AnnotationHTTPPort: httpPort, AnnotationKVEventsPort: kvPort, AnnotationMetricsPath: path, AnnotationEngine: engine})
		r, err := Parse(pod, ip, "k8s.ns.p")
		if err != nil {
			var ae *AnnotationError
			if !errors.As(err, &ae) || (ae.Annotation != Unknown && ae.Annotation != Pod && !slices.Contains(annotations, ae.Annotation)) {
				t.Fatalf("error %v has no bounded annotation label", err)
			}
			return
		}
		if len(r.Model) == 0 || len(r.Model) > events.MaxNameLen || r.BlockSize == 0 || r.BlockSize > events.MaxBlockSize {
			t.Fatalf("out of bounds: %+v", r)
		}
		podAddr, err := netip.ParseAddr(ip)
		if err != nil {
			t.Fatalf("IP %q passed: %v", ip, err)
		}
		for _, s := range []string{r.HTTPURL, r.MetricsURL} {
			u, err := url.Parse(s)
			if err != nil || u.Scheme != "http" || u.RawQuery != "" || u.Fragment != "" || u.User != nil || len(s) > events.MaxEndpointLen {
				t.Fatalf("URL %q: %v", s, err)
			}
			if host, err := netip.ParseAddr(u.Hostname()); err != nil || host != podAddr.Unmap() {
				t.Fatalf("URL %q: the host is not the pod IP %s", s, ip)
			}
		}
	})
}
