// Package loadgen drives a pdrouter API with routing requests and measures
// it: `pdrouter bench api`. It registers a fleet, warms some workers' caches
// with shared prefixes through the HTTP ingest endpoint, then runs closed-
// loop clients for a fixed time and reports throughput and latency
// percentiles of POST /v1/route, end to end (HTTP, decision, durable audit).
package loadgen

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pdrouter/pdrouter/events"
	"github.com/pdrouter/pdrouter/kvhash"
)

// Config shapes a run.
type Config struct {
	URL            string
	DecodeWorkers  int
	PrefillWorkers int
	BlockSize      int
	// MinTokens and MaxTokens bound prompt lengths (uniform).
	MinTokens, MaxTokens int
	// SharedPrefixes is how many distinct system prompts requests share;
	// each decode worker is warmed with some of them.
	SharedPrefixes int
	Clients        int
	Duration       time.Duration
	Warmup         time.Duration
	// Hashes sends block_hashes (precomputed chains) instead of token_ids,
	// as a gateway that hashes once would.
	Hashes bool
	// InFlight is how many of its routed requests each client keeps
	// running: once it has more, it reports the oldest completed (POST
	// /v1/requests/{id}/events), as a gateway does when a response ends.
	// Without completions the router's active accounting only grows (each
	// decision adds its blocks until the expiry, minutes later), so a run
	// is not a steady state. 0 sends none.
	InFlight int
	Seed     uint64
	// Rate, when above 0, holds the route requests a second of all
	// clients together near it by a think time each client waits once
	// answered (pacer.go); 0 lets each client send as soon as its last
	// answer arrives.
	Rate float64
	// RunID names this run in its request ids (bench-<RunID>-<n>); empty,
	// a random one. Ids must not repeat across runs on one router: a
	// repeated id is answered from the idempotency index, a replay that
	// costs almost nothing and would inflate the figures.
	RunID string
	// Window is the length of the windows the measured time is reported
	// in (Result.Windows and the progress log); default 5 s.
	Window time.Duration
	Log    *slog.Logger
	// Spread lists more routers of the same group (base URLs like URL):
	// client c then sends its requests and lifecycle events to the c-th
	// of URL and Spread, in turn, so that a group's replicas all answer.
	// The fleet is registered through URL; the others reach its state
	// through the log (every request waits for the setup's offsets).
	Spread []string
	// Cells, when above 1, is how many cells the routers split the log
	// into (serve --cell): router i of URL and Spread serves cell
	// i mod Cells. Each worker is registered and warmed through the first
	// router of its cell, and requests to a router wait for its cell's
	// setup offsets only (the others are another cell's partitions).
	Cells int
	// OnMeasure, when set, is called when the measured time begins (true)
	// and when it ends (false), so a caller can read other processes'
	// counters over exactly that time.
	OnMeasure func(measuring bool)
}

// Result is a run's outcome.
type Result struct {
	Requests   int
	Errors     map[int]int
	Elapsed    time.Duration
	Throughput float64
	P50, P99   time.Duration
	P999, Max  time.Duration
	Local      int
	// Replays is how many 200 answers were idempotent replays of an
	// earlier decision (the ids were used before): not counted as
	// decisions, nor in the latencies.
	Replays int
	// Completions is how many lifecycle events were accepted during the
	// measured time, and CompletionErrors the others, by status.
	Completions      int
	CompletionErrors map[int]int
	// CPU is this process's CPU time over the measured time.
	CPU time.Duration
	// ByTarget counts Requests by router: URL first, then Spread's.
	ByTarget []int
	// Windows are the measured time's consecutive Config.Window windows
	// (the last may be shorter; one under a fifth of a window is left
	// out), so a rate that does not hold shows.
	Windows []Window
}

// Window is one stretch of the measured time.
type Window struct {
	Elapsed    time.Duration
	Throughput float64
	P99        time.Duration
}

// windowLatencies collects the decisions of the current window.
type windowLatencies struct {
	mu  sync.Mutex
	lat []time.Duration
}

func (w *windowLatencies) add(d time.Duration) {
	w.mu.Lock()
	w.lat = append(w.lat, d)
	w.mu.Unlock()
}

// close ends the window that began at start and returns it.
func (w *windowLatencies) close(start time.Time) Window {
	w.mu.Lock()
	lat := w.lat
	w.lat = nil
	w.mu.Unlock()
	el := time.Since(start)
	win := Window{Elapsed: el, Throughput: float64(len(lat)) / el.Seconds()}
	if len(lat) > 0 {
		slices.Sort(lat)
		win.P99 = lat[min(len(lat)-1, len(lat)*99/100)]
	}
	return win
}

type prompt struct {
	tokens []uint32
	hashes []uint64
}

// Run executes the benchmark.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	// setup uses net/http; the measured loop uses one conn per client
	// (client.go).
	cl := &http.Client{Timeout: 30 * time.Second}
	targets := make([]*conn, 0, 1+len(cfg.Spread))
	for _, u := range append([]string{cfg.URL}, cfg.Spread...) {
		k, err := newConn(u, 30*time.Second)
		if err != nil {
			return Result{}, err
		}
		targets = append(targets, k)
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 7))
	prefixes := make([][]uint32, cfg.SharedPrefixes)
	for i := range prefixes {
		prefixes[i] = randTokens(rng, cfg.MinTokens/2)
	}
	cells := max(cfg.Cells, 1)
	if len(targets) < cells {
		return Result{}, fmt.Errorf("loadgen: %d cells need a router each at least, have %d", cells, len(targets))
	}
	after, err := setup(ctx, cl, cfg, prefixes)
	if err != nil {
		return Result{}, err
	}
	// Pre-build a pool of request bodies, so the generator spends its CPU on
	// sending, not on building JSON: bodies[i] goes to cell i mod cells.
	bodies := make([][]byte, 512)
	for i := range bodies {
		n := cfg.MinTokens + rng.IntN(cfg.MaxTokens-cfg.MinTokens+1)
		p := prefixes[rng.IntN(len(prefixes))]
		toks := append(append([]uint32(nil), p[:min(len(p), n)]...), randTokens(rng, max(0, n-len(p)))...)
		req := map[string]any{"model": "bench", "after": after[i%cells]}
		if cfg.Hashes {
			req["block_hashes"] = kvhash.Chain(nil, toks, cfg.BlockSize, 0, false)
			req["block_size"], req["prompt_tokens"] = cfg.BlockSize, len(toks)
		} else {
			req["token_ids"] = toks
		}
		if bodies[i], err = json.Marshal(req); err != nil {
			return Result{}, err
		}
	}
	cfg.Log.Info("bench api: load", "clients", cfg.Clients, "duration", cfg.Duration, "warmup", cfg.Warmup,
		"prompt_tokens", fmt.Sprintf("%d-%d", cfg.MinTokens, cfg.MaxTokens), "block_hashes", cfg.Hashes)

	var (
		mu      sync.Mutex
		lat     []time.Duration
		errs    = map[int]int{}
		cerrs   = map[int]int{}
		local   int
		done    int
		seq     atomic.Int64
		measure atomic.Bool
		replays int
		window  windowLatencies
		byConn  = make([]int, len(targets))
	)
	if cfg.RunID == "" {
		var b [4]byte
		_, _ = crand.Read(b[:])
		cfg.RunID = hex.EncodeToString(b[:])
	}
	cfg.Log.Info("bench api: request ids", "pattern", "bench-"+cfg.RunID+"-<n>")
	stop := make(chan struct{})
	pace := newPacer(cfg.Clients, cfg.Rate)
	if pace != nil {
		go pace.control(&seq, stop)
	}
	var wg sync.WaitGroup
	for c := 0; c < cfg.Clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			var mine []time.Duration
			myErrs, myCErrs := map[int]int{}, map[int]int{}
			myLocal, myDone, myReplays := 0, 0, 0
			var running []int64 // routed, not yet completed: oldest first
			k := targets[c%len(targets)].clone()
			defer k.close()
			var head, path []byte
			for i := c; ; i++ {
				select {
				case <-stop:
					mu.Lock()
					lat = append(lat, mine...)
					for k, v := range myErrs {
						errs[k] += v
					}
					for k, v := range myCErrs {
						cerrs[k] += v
					}
					local += myLocal
					done += myDone
					replays += myReplays
					byConn[c%len(targets)] += len(mine)
					mu.Unlock()
					return
				default:
				}
				if pace != nil && i != c && !pace.wait(stop) {
					continue // stopped: the select above returns
				}
				id := seq.Add(1)
				start := time.Now()
				head = withRequestID(head[:0], cfg.RunID, id)
				// A body of this client's cell: client c sends to router
				// c mod len(targets), of cell (c mod len(targets)) mod cells.
				b := i%(len(bodies)/cells)*cells + c%len(targets)%cells
				code, isLocal, replay := send(k, head, bodies[b][1:])
				d := time.Since(start)
				if code == http.StatusOK && cfg.InFlight > 0 {
					running = append(running, id)
					if len(running) > cfg.InFlight {
						path = completionPath(path[:0], cfg.RunID, running[0])
						code := complete(k, path)
						running = running[1:]
						if measure.Load() {
							if code == http.StatusAccepted {
								myDone++
							} else {
								myCErrs[code]++
							}
						}
					}
				}
				if !measure.Load() {
					continue
				}
				if code != http.StatusOK {
					myErrs[code]++
					continue
				}
				if replay {
					myReplays++
					continue
				}
				mine = append(mine, d)
				window.add(d)
				if isLocal {
					myLocal++
				}
			}
		}(c)
	}
	time.Sleep(cfg.Warmup)
	if cfg.OnMeasure != nil {
		cfg.OnMeasure(true)
	}
	measure.Store(true)
	begin, cpu0 := time.Now(), cpuTime()
	if cfg.Window <= 0 {
		cfg.Window = 5 * time.Second
	}
	progress := time.NewTicker(cfg.Window)
	defer progress.Stop()
	deadline := time.After(cfg.Duration)
	var windows []Window
	winStart := begin
loop:
	for {
		select {
		case <-deadline:
			break loop
		case <-ctx.Done():
			break loop
		case now := <-progress.C:
			w := window.close(winStart)
			winStart = now
			windows = append(windows, w)
			cfg.Log.Info("bench api: running", "elapsed", time.Since(begin).Round(time.Second), "sent", seq.Load(),
				"window_decisions_per_s", int(w.Throughput), "window_p99", w.P99.Round(time.Microsecond))
		}
	}
	// The measured time ends here: decisions that complete while the
	// clients stop are neither in the run nor in a window (but for the one
	// a client may be recording right now), so the run's rate and its
	// windows count the same decisions over the same time.
	measure.Store(false)
	if last := window.close(winStart); last.Elapsed >= cfg.Window/5 {
		windows = append(windows, last)
	}
	elapsed, cpu := time.Since(begin), cpuTime()-cpu0
	if cfg.OnMeasure != nil {
		cfg.OnMeasure(false)
	}
	close(stop)
	wg.Wait()
	res := Result{Requests: len(lat), Errors: errs, Elapsed: elapsed, Local: local, Replays: replays, Completions: done, CompletionErrors: cerrs, CPU: cpu, Windows: windows, ByTarget: byConn}
	if len(lat) == 0 {
		if replays > 0 {
			return res, fmt.Errorf("bench api: all %d answers replayed earlier decisions: request ids bench-%s-<n> were used before on this router", replays, cfg.RunID)
		}
		return res, fmt.Errorf("bench api: no request succeeded (errors by status: %v)", errs)
	}
	slices.Sort(lat)
	q := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	res.P50, res.P99, res.P999, res.Max = q(0.5), q(0.99), q(0.999), lat[len(lat)-1]
	res.Throughput = float64(len(lat)) / elapsed.Seconds()
	return res, nil
}

// withRequestID appends the front of a route body with a fresh request id
// to b: `{"request_id":"bench-RUN-N",`. The shared body after its opening
// brace follows it on the wire, so every request is a new decision and no
// body is copied.
func withRequestID(b []byte, run string, n int64) []byte {
	b = append(b, `{"request_id":"`...)
	b = appendID(b, run, n)
	return append(b, `",`...)
}

// completionPath appends the lifecycle path of request n to b.
func completionPath(b []byte, run string, n int64) []byte {
	b = append(b, "/v1/requests/"...)
	b = appendID(b, run, n)
	return append(b, "/events"...)
}

func appendID(b []byte, run string, n int64) []byte {
	b = append(b, "bench-"...)
	b = append(b, run...)
	b = append(b, '-')
	return strconv.AppendInt(b, n, 10)
}

// send posts a route request (with a Content-Length, as gateways do, not
// chunked) and returns its status, whether the decision was local, and
// whether the answer replayed an earlier decision.
func send(k *conn, head, tail []byte) (code int, local, replay bool) {
	code, body, err := k.post("/v1/route", head, tail)
	if err != nil {
		return 0, false, false
	}
	return code, bytes.Contains(body, []byte(`"mode":"local"`)), bytes.Contains(body, []byte(`"idempotent_replay":true`))
}

// completedBody is a completion as the OpenAI front door reports one: with
// what it measured, which the replicas' latency models learn.
var completedBody = []byte(`{"event":"completed","output_tokens":256,"ttft_ms":180,"itl_ms_mean":22.5}`)

// complete reports a request completed and returns the status.
func complete(k *conn, path []byte) int {
	code, _, err := k.post(string(path), completedBody, nil)
	if err != nil {
		return 0
	}
	return code
}

// cpuTime is this process's CPU time (user + system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func randTokens(rng *rand.Rand, n int) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		t[i] = rng.Uint32N(128000)
	}
	return t
}

// workerIDs names n workers prefix000, prefix001, …; with cells, ids of
// that sequence, in order, chosen to fill the cells in turn (worker k in
// cell k mod cells), so that every cell has its share of the fleet.
func workerIDs(prefix string, n int, cells int32) []string {
	ids := make([]string, 0, n)
	next := 0
	for k := range n {
		for ; ; next++ {
			if id := fmt.Sprintf("%s%03d", prefix, next); cells <= 1 || events.CellOfWorker(id, cells).Index == int32(k)%cells {
				ids = append(ids, id)
				next++
				break
			}
		}
	}
	return ids
}

// setup registers the fleet and warms caches: decode worker i holds shared
// prefix i mod SharedPrefixes. It returns, per cell, the `after` vector
// covering its workers.
// readyTimeout bounds the wait for the router to be ready before setup.
const readyTimeout = 2 * time.Minute

// waitReady polls the router's /readyz while it answers 503: a replica
// that has not read the log's end yet answers 503 not_ready to the
// registrations and events of the setup. Any other answer (200, or a
// router without /readyz) ends the wait.
func waitReady(ctx context.Context, cl *http.Client, url string) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, "GET", url+"/readyz", nil)
		if resp, err := cl.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the router at %s was not ready within %s: %w", url, readyTimeout, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func setup(ctx context.Context, cl *http.Client, cfg Config, prefixes [][]uint32) ([]map[string]map[string]int64, error) {
	cells := int32(max(cfg.Cells, 1))
	routers := append([]string{cfg.URL}, cfg.Spread...)
	for _, u := range routers[:cells] {
		if err := waitReady(ctx, cl, u); err != nil {
			return nil, err
		}
	}
	afters := make([]map[string]map[string]int64, cells)
	for i := range afters {
		afters[i] = map[string]map[string]int64{}
	}
	postJSON := func(worker, path string, v any) error {
		c := events.CellOfWorker(worker, cells).Index
		after := afters[c]
		b, _ := json.Marshal(v)
		req, _ := http.NewRequestWithContext(ctx, "POST", routers[c]+path, bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		resp, err := cl.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusAccepted {
			return fmt.Errorf("POST %s: %d %s", path, resp.StatusCode, raw)
		}
		var o struct {
			Offsets map[string]map[string]int64 `json:"offsets"`
		}
		if err := json.Unmarshal(raw, &o); err != nil {
			return err
		}
		for t, ps := range o.Offsets {
			if after[t] == nil {
				after[t] = map[string]int64{}
			}
			for p, off := range ps {
				after[t][p] = max(after[t][p], off)
			}
		}
		return nil
	}
	for i, id := range workerIDs("bench-decode-", cfg.DecodeWorkers, cells) {
		if err := postJSON(id, "/v1/workers", map[string]any{"worker_id": id, "pool": "decode", "model": "bench",
			"block_size": cfg.BlockSize, "total_kv_blocks": 1 << 20, "max_num_batched_tokens": 8192}); err != nil {
			return nil, err
		}
		p := prefixes[i%len(prefixes)]
		n := len(p) / cfg.BlockSize
		hashes := make([]uint64, n)
		for j := range hashes {
			hashes[j] = uint64(i)<<32 | uint64(j+1)
		}
		if err := postJSON(id, "/v1/events/kv", map[string]any{"worker_id": id, "events": []map[string]any{{
			"type": "stored", "block_hashes": hashes, "token_ids": p[:n*cfg.BlockSize], "block_size": cfg.BlockSize, "medium": "GPU"}}}); err != nil {
			return nil, err
		}
	}
	for _, id := range workerIDs("bench-prefill-", cfg.PrefillWorkers, cells) {
		if err := postJSON(id, "/v1/workers", map[string]any{"worker_id": id, "pool": "prefill",
			"model": "bench", "block_size": cfg.BlockSize, "max_num_batched_tokens": 8192}); err != nil {
			return nil, err
		}
	}
	return afters, nil
}
