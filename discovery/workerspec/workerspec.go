// Package workerspec turns a worker pod's pdrouter.io/ annotations and IP
// into the body of its registration (POST /v1/workers). The annotations are
// input from whoever can create pods: every value is checked against a
// named limit and a refusal names the annotation at fault. The package
// imports no Kubernetes code, so its fuzz target builds quickly.
package workerspec

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/pdrouter/pdrouter/api/registration"
	"github.com/pdrouter/pdrouter/events"
	"github.com/pdrouter/pdrouter/internal/textcut"
)

// AnnotationPrefix starts every annotation the watcher reads. A key under it
// that is not one of the annotations below refuses the pod: a misspelt key
// (pdrouter.io/blocksize) would otherwise be ignored without a word.
const AnnotationPrefix = "pdrouter.io/"

// The annotations of a worker pod. Pool, model and block size are required;
// the rest are optional. Ports are decimal in [1, 65535]; the URLs and ZMQ
// endpoints are built from the pod IP and these ports, never taken whole
// from an annotation, so a pod can only name addresses of its own.
const (
	// AnnotationPool is "prefill" or "decode".
	AnnotationPool = AnnotationPrefix + "pool"
	// AnnotationModel is the served model name, 1 to events.MaxNameLen bytes.
	AnnotationModel = AnnotationPrefix + "model"
	// AnnotationEngine is vllm, sglang, trtllm or sim (any case).
	AnnotationEngine = AnnotationPrefix + "engine"
	// AnnotationBlockSize is the engine's KV block size in tokens, in
	// [1, events.MaxBlockSize].
	AnnotationBlockSize = AnnotationPrefix + "block-size"
	// AnnotationTotalKVBlocks is the engine's KV cache capacity in blocks,
	// at most MaxTotalKVBlocks.
	AnnotationTotalKVBlocks = AnnotationPrefix + "total-kv-blocks"
	// AnnotationMaxNumBatchedTokens is the engine's batch token budget, at
	// most MaxBatchedTokens.
	AnnotationMaxNumBatchedTokens = AnnotationPrefix + "max-num-batched-tokens"
	// AnnotationDPSize is the data-parallel size, at most events.MaxDPSize.
	AnnotationDPSize = AnnotationPrefix + "dp-size"
	// AnnotationHTTPPort is the engine's OpenAI-compatible port: http_url
	// is http://<pod IP>:<port>.
	AnnotationHTTPPort = AnnotationPrefix + "http-port"
	// AnnotationKVEventsPort is the engine's KV-events ZMQ publisher:
	// kv_events_endpoint is tcp://<pod IP>:<port>.
	AnnotationKVEventsPort = AnnotationPrefix + "kv-events-port"
	// AnnotationKVReplayPort is the engine's KV-events replay socket:
	// kv_replay_endpoint is tcp://<pod IP>:<port>.
	AnnotationKVReplayPort = AnnotationPrefix + "kv-replay-port"
	// AnnotationKVEventsTopic is the engine's KV-events topic, at most
	// events.MaxTopicLen bytes.
	AnnotationKVEventsTopic = AnnotationPrefix + "kv-events-topic"
	// AnnotationMetricsPort is the port of the engine's Prometheus metrics;
	// without it the http-port serves them (vLLM and SGLang do). Without
	// either, no metrics_url is registered.
	AnnotationMetricsPort = AnnotationPrefix + "metrics-port"
	// AnnotationMetricsPath is the metrics path, default DefaultMetricsPath;
	// it starts with "/", is at most MaxMetricsPathLen bytes of letters,
	// digits and -._~/.
	AnnotationMetricsPath = AnnotationPrefix + "metrics-path"
)

// Limits of annotation values beyond those of the API itself.
const (
	// MaxAnnotationValueLen bounds every value before it is parsed: the
	// longest valid one is a model name.
	MaxAnnotationValueLen = events.MaxNameLen
	// MaxTotalKVBlocks bounds total-kv-blocks: 2^40 blocks of 16 tokens
	// are far beyond any engine's cache, so a larger number is a mistake.
	MaxTotalKVBlocks = 1 << 40
	// MaxBatchedTokens bounds max-num-batched-tokens likewise.
	MaxBatchedTokens = 1 << 30
	// MaxMetricsPathLen bounds metrics-path.
	MaxMetricsPathLen = 256
	// DefaultMetricsPath is the metrics path without a metrics-path
	// annotation.
	DefaultMetricsPath = "/metrics"
)

// annotations are the known keys, sorted (Known).
var annotations = []string{
	AnnotationBlockSize, AnnotationDPSize, AnnotationEngine, AnnotationHTTPPort,
	AnnotationKVEventsPort, AnnotationKVEventsTopic, AnnotationKVReplayPort,
	AnnotationMaxNumBatchedTokens, AnnotationMetricsPath, AnnotationMetricsPort,
	AnnotationModel, AnnotationPool, AnnotationTotalKVBlocks,
}

// Known returns the known annotation keys, sorted.
func Known() []string { return slices.Clone(annotations) }

// The values of AnnotationError.Annotation that are not annotation keys.
const (
	// Unknown is a key under AnnotationPrefix that is not known.
	Unknown = "unknown"
	// Pod is the pod itself: its IP or its worker id.
	Pod = "pod"
)

// AnnotationError is why a pod's annotations (or its IP or name) give no
// registration.
type AnnotationError struct {
	// Annotation is the key at fault, Unknown or Pod: a bounded set (a
	// metric label).
	Annotation string
	// Key is the annotation key as the pod has it (cut to 64 bytes), for
	// the message.
	Key string
	Msg string
}

func (e *AnnotationError) Error() string {
	if e.Annotation == Pod {
		return "pod: " + e.Msg
	}
	return fmt.Sprintf("annotation %s: %s", e.Key, e.Msg)
}

func refuse(key, format string, a ...any) *AnnotationError {
	return &AnnotationError{Annotation: key, Key: key, Msg: fmt.Sprintf(format, a...)}
}

// Parse builds the registration of worker id from a pod's annotations and
// IP. Every value is checked; the first fault is returned as an
// *AnnotationError. Keys are checked in sorted order, so the same pod
// always gets the same error.
func Parse(a map[string]string, podIP, id string) (registration.Request, error) {
	var r registration.Request
	if err := events.ValidateWorkerID(id); err != nil {
		return r, &AnnotationError{Annotation: Pod, Msg: fmt.Sprintf("worker id %s: %v", textcut.Truncate(id, 64), err)}
	}
	ip, err := parseIP(podIP)
	if err != nil {
		return r, err
	}
	keys := make([]string, 0, len(a))
	for k := range a {
		if strings.HasPrefix(k, AnnotationPrefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		if _, ok := slices.BinarySearch(annotations, k); !ok {
			return r, &AnnotationError{Annotation: Unknown, Key: textcut.Truncate(k, 64),
				Msg: fmt.Sprintf("not a known annotation under %s (known: %s)", AnnotationPrefix, strings.Join(annotations, ", "))}
		}
		if len(a[k]) > MaxAnnotationValueLen {
			return r, refuse(k, "the value is %d bytes: at most %d (MaxAnnotationValueLen)", len(a[k]), MaxAnnotationValueLen)
		}
	}
	r.WorkerID = id
	switch p := a[AnnotationPool]; p {
	case registration.PoolPrefill, registration.PoolDecode:
		r.Pool = p
	case "":
		return r, refuse(AnnotationPool, "required: prefill or decode")
	default:
		return r, refuse(AnnotationPool, "%q: want prefill or decode", p)
	}
	if r.Model = a[AnnotationModel]; r.Model == "" {
		return r, refuse(AnnotationModel, "required: the served model name")
	}
	if eng, ok := a[AnnotationEngine]; ok {
		if !slices.Contains(registration.Engines(), strings.ToLower(eng)) {
			return r, refuse(AnnotationEngine, "%q: want one of %s", eng, strings.Join(registration.Engines(), ", "))
		}
		r.Engine = strings.ToLower(eng)
	}
	bs, err := number(a, AnnotationBlockSize, true, 1, events.MaxBlockSize)
	if err != nil {
		return r, err
	}
	r.BlockSize = uint32(bs)
	if r.TotalKVBlocks, err = optionalNumber(a, AnnotationTotalKVBlocks, MaxTotalKVBlocks); err != nil {
		return r, err
	}
	if r.MaxNumBatchedTokens, err = optionalNumber(a, AnnotationMaxNumBatchedTokens, MaxBatchedTokens); err != nil {
		return r, err
	}
	dp, err := number(a, AnnotationDPSize, false, 0, events.MaxDPSize)
	if err != nil {
		return r, err
	}
	r.DPSize = uint32(dp)
	if t := a[AnnotationKVEventsTopic]; len(t) > events.MaxTopicLen {
		return r, refuse(AnnotationKVEventsTopic, "%d bytes: at most %d (events.MaxTopicLen)", len(t), events.MaxTopicLen)
	}
	r.KVEventsTopic = a[AnnotationKVEventsTopic]
	return r, endpoints(&r, a, ip)
}

// endpoints fills the URLs and ZMQ endpoints from the pod IP and the port
// annotations.
func endpoints(r *registration.Request, a map[string]string, ip netip.Addr) error {
	ports := map[string]uint64{}
	for _, k := range []string{AnnotationHTTPPort, AnnotationKVEventsPort, AnnotationKVReplayPort, AnnotationMetricsPort} {
		p, err := number(a, k, false, 1, 65535)
		if err != nil {
			return err
		}
		ports[k] = p
	}
	at := func(port uint64) string { return netip.AddrPortFrom(ip, uint16(port)).String() }
	if p := ports[AnnotationHTTPPort]; p != 0 {
		r.HTTPURL = "http://" + at(p)
	}
	if p := ports[AnnotationKVEventsPort]; p != 0 {
		r.KVEventsEndpoint = "tcp://" + at(p)
	}
	if p := ports[AnnotationKVReplayPort]; p != 0 {
		r.KVReplayEndpoint = "tcp://" + at(p)
	}
	path, ok := a[AnnotationMetricsPath]
	if !ok {
		path = DefaultMetricsPath
	}
	if err := checkMetricsPath(path); err != nil {
		return err
	}
	mp := ports[AnnotationMetricsPort]
	if mp == 0 {
		mp = ports[AnnotationHTTPPort]
	}
	if mp != 0 {
		r.MetricsURL = "http://" + at(mp) + path
	}
	return nil
}

// checkMetricsPath allows an absolute path of unreserved characters only: no
// query, fragment, percent-escape or "..", which a scraper would resolve in
// ways the pod's owner did not see.
func checkMetricsPath(p string) error {
	if !strings.HasPrefix(p, "/") || len(p) > MaxMetricsPathLen {
		return refuse(AnnotationMetricsPath, "%q: an absolute path of at most %d bytes (MaxMetricsPathLen) is required", textcut.Truncate(p, 64), MaxMetricsPathLen)
	}
	for _, c := range []byte(p) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~/", c) >= 0) {
			return refuse(AnnotationMetricsPath, "%q: byte %q is not allowed (letters, digits and -._~/ only)", textcut.Truncate(p, 64), c)
		}
	}
	if slices.Contains(strings.Split(p, "/"), "..") {
		return refuse(AnnotationMetricsPath, "%q: no .. segments", textcut.Truncate(p, 64))
	}
	return nil
}

// number parses a decimal annotation in [lo, hi]. Absent is 0 when not
// required.
func number(a map[string]string, key string, required bool, lo, hi uint64) (uint64, error) {
	s, ok := a[key]
	if !ok {
		if required {
			return 0, refuse(key, "required: a number in [%d, %d]", lo, hi)
		}
		return 0, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || v < lo || v > hi {
		return 0, refuse(key, "%q: want a decimal number in [%d, %d]", textcut.Truncate(s, 64), lo, hi)
	}
	return v, nil
}

// optionalNumber is number for the capacity fields, where absent (nil) is
// kept apart from 0.
func optionalNumber(a map[string]string, key string, hi uint64) (*uint64, error) {
	if _, ok := a[key]; !ok {
		return nil, nil
	}
	v, err := number(a, key, true, 0, hi)
	if err != nil {
		return nil, err
	}
	return &v, nil
}

// parseIP parses the pod's primary IP, refused when it cannot be dialled.
func parseIP(s string) (netip.Addr, error) {
	ip, err := netip.ParseAddr(s)
	if err != nil || ip.Zone() != "" || ip.IsUnspecified() || ip.IsMulticast() {
		return netip.Addr{}, &AnnotationError{Annotation: Pod,
			Msg: fmt.Sprintf("pod IP %q is not a unicast IP address", textcut.Truncate(s, 64))}
	}
	return ip.Unmap(), nil
}
