// Package doorbench measures what the OpenAI front door adds to time to
// first token: the same streamed requests, at the same concurrency, sent
// to an engine directly and through a door in front of it. The engines are
// behind an interface (Upstream), so the bench runs against the simulated
// engines (`pdrouter bench door`) or the in-process doortest engines.
//
// Concurrency is closed-loop: each of the Streams clients keeps one
// connection and sends its next request when the previous answer has
// ended, as a serving client does, rather than all requests arriving at
// once. The two modes run in alternating rounds, so that a change of the
// machine's load during the run weighs on both alike, and the clients run
// on from one round into the next (no round starts with every client
// sending at once). The p99 difference is reported with a bootstrap
// interval over pairs of rounds (interval.go): a run says how far it can
// be trusted, and --aa (both modes direct) measures the bench's noise.
package doorbench

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pdrouter/pdrouter/door"
	"github.com/pdrouter/pdrouter/internal/benchtable"
)

// Upstream is an OpenAI engine the bench sends requests to.
type Upstream interface {
	// URL is the engine's base URL, without /v1.
	URL() string
	Close()
}

// Config is one run.
type Config struct {
	// Streams is the concurrency (closed-loop clients). Default 64.
	Streams int
	// Requests per mode (direct, through the door). Default 2000.
	Requests int
	// Engines are started by Start, Workers of them. Default 4.
	Workers int
	Start   func(id string) (Upstream, error)
	// Model is the model requests name (default "bench").
	Model string
	// Rounds alternate the modes (default 4 per mode).
	Rounds int
	// MaxAddedP99 is the bar of the p99 difference; 0: report only.
	MaxAddedP99 time.Duration
	// PromptTokens and OutputTokens shape every request (defaults 1024 and
	// 128, a chat turn). They set the request rate of the closed loop: with
	// a few output tokens each, 64 streams would ask more requests a second
	// than two cores serve at all, and the bench would measure the queue
	// for the CPU rather than the door.
	PromptTokens, OutputTokens int
	// AA sends the door's rounds to the engines directly too: an A/A run,
	// whose "door adds" rows are the bench's noise (what two samples of
	// one mode differ by), to judge a real run's differences against.
	AA bool
}

// Result holds the TTFT percentiles of both modes, and the process's CPU
// time per request in each (client, engines and, through the door, the
// door: the difference is the door's).
type Result struct {
	Direct, Door       [2]time.Duration // p50, p99
	DirectCPU, DoorCPU time.Duration
	// DirectAlloc and DoorAlloc are the process's heap allocation per
	// request in each mode: the difference is the door's, which sets its
	// share of the collector's work.
	DirectAlloc, DoorAlloc uint64
	// DirectWall and DoorWall are each mode's time (its rounds, summed):
	// requests over it are the request rate, CPU over it the cores kept
	// busy.
	DirectWall, DoorWall time.Duration
	// Dials counts the TCP connections opened during the measured rounds
	// (after the warm-up): by the clients to the engines (direct), by the
	// clients to the door, and by the door to the engines. A pool that
	// covers the streams opens none.
	DialsDirect, DialsToDoor, DialsFromDoor int64
}

// Run runs the bench and prints its table to out.
func Run(ctx context.Context, cfg Config, out io.Writer) (Result, []benchtable.Row, error) {
	if cfg.Streams <= 0 {
		cfg.Streams = 64
	}
	if cfg.Requests <= 0 {
		cfg.Requests = 2000
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	if cfg.Model == "" {
		cfg.Model = "bench"
	}
	if cfg.Rounds <= 0 {
		cfg.Rounds = 4
	}
	if cfg.PromptTokens <= 0 {
		cfg.PromptTokens = 1024
	}
	if cfg.OutputTokens <= 0 {
		cfg.OutputTokens = 128
	}
	var ups []Upstream
	defer func() {
		for _, u := range ups {
			u.Close()
		}
	}()
	for i := range cfg.Workers {
		u, err := cfg.Start(fmt.Sprintf("bench-%d", i))
		if err != nil {
			return Result{}, nil, err
		}
		ups = append(ups, u)
	}
	var fromDoor, toDoor, direct atomic.Int64
	tl := newTimeline()
	d, err := door.New(door.Deps{Decider: &roundRobin{ups: ups, tl: tl}, Fleet: fleet{ups, cfg.Model}, Outcomes: discard{}},
		door.WithMetrics(prometheus.NewRegistry()), door.WithMaxInFlight(4*cfg.Streams), door.WithDialer(tl.dialer(&fromDoor)))
	if err != nil {
		return Result{}, nil, err
	}
	gin.SetMode(gin.ReleaseMode)
	e := gin.New()
	d.Mount(e.Group("/v1"))
	srv := httptest.NewUnstartedServer(e)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			toDoor.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()

	doorURL := srv.URL
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * cfg.Streams, DisableCompression: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if "http://"+addr != doorURL {
				direct.Add(1)
			}
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}}}
	var rr atomic.Uint64
	directURL := func() string { return ups[rr.Add(1)%uint64(len(ups))].URL() }
	viaDoor := func() string { return srv.URL }
	if cfg.AA {
		viaDoor = directURL
	}
	body := requestBody(cfg)
	var (
		res            Result
		dt, vt         []sample
		dCPU, vCPU     time.Duration
		dAlloc, vAlloc uint64
		directN, doorN int
	)
	phases, err := runPhases(ctx, client, [2]func() string{directURL, viaDoor}, body, cfg.Streams, max(1, cfg.Requests/cfg.Rounds), cfg.Rounds,
		func() { fromDoor.Store(0); toDoor.Store(0); direct.Store(0) })
	if err != nil {
		return Result{}, nil, err
	}
	var dRounds, vRounds [][]time.Duration
	for i, ph := range phases {
		if i%2 == 0 {
			dt, dCPU, res.DirectWall, directN = append(dt, ph.samples...), dCPU+ph.cpu, res.DirectWall+ph.wall, directN+len(ph.samples)
			dAlloc += ph.alloc
			dRounds = append(dRounds, ttfts(ph.samples))
		} else {
			vt, vCPU, res.DoorWall, doorN = append(vt, ph.samples...), vCPU+ph.cpu, res.DoorWall+ph.wall, doorN+len(ph.samples)
			vAlloc += ph.alloc
			vRounds = append(vRounds, ttfts(ph.samples))
		}
	}
	dTTFT, vTTFT := ttfts(dt), ttfts(vt)
	res.Direct = [2]time.Duration{pct(dTTFT, 50), pct(dTTFT, 99)}
	res.Door = [2]time.Duration{pct(vTTFT, 50), pct(vTTFT, 99)}
	sp := split(tl, vt)
	p5099 := func(d []time.Duration) string { return fmt.Sprintf("%s / %s", pct(d, 50), pct(d, 99)) }
	res.DirectCPU, res.DoorCPU = dCPU/time.Duration(max(1, directN)), vCPU/time.Duration(max(1, doorN))
	res.DirectAlloc, res.DoorAlloc = dAlloc/uint64(max(1, directN)), vAlloc/uint64(max(1, doorN))
	res.DialsDirect, res.DialsToDoor, res.DialsFromDoor = direct.Load(), toDoor.Load(), fromDoor.Load()
	rate := func(n int, wall time.Duration) float64 { return float64(n) / max(wall.Seconds(), 1e-9) }
	cores := func(cpu, wall time.Duration) float64 { return cpu.Seconds() / max(wall.Seconds(), 1e-9) }
	added50, added99 := res.Door[0]-res.Direct[0], res.Door[1]-res.Direct[1]
	lo50, hi50 := diffInterval(dRounds, vRounds, 50)
	lo99, hi99 := diffInterval(dRounds, vRounds, 99)
	detail := fmt.Sprintf("%d closed-loop streams of %d prompt and %d output tokens, %d requests per mode in %d alternating rounds, %d engines", cfg.Streams, cfg.PromptTokens, cfg.OutputTokens, len(dt), cfg.Rounds, cfg.Workers)
	if cfg.AA {
		detail += "; A/A: the \"via door\" rounds went to the engines directly too"
	}
	rows := []benchtable.Row{
		benchtable.NewRow("ttft direct p50 / p99", fmt.Sprintf("%s / %s", res.Direct[0], res.Direct[1]), "", "", detail),
		benchtable.NewRow("ttft via door p50 / p99", fmt.Sprintf("%s / %s", res.Door[0], res.Door[1]), "", "", detail),
		benchtable.NewRow("cpu per request direct / via door", fmt.Sprintf("%s / %s", res.DirectCPU.Round(time.Microsecond), res.DoorCPU.Round(time.Microsecond)), "", "",
			fmt.Sprintf("process CPU (client, engines, door) ÷ requests; the door's share: %s", (res.DoorCPU-res.DirectCPU).Round(time.Microsecond))),
		benchtable.NewRow("heap allocated per request direct / via door", fmt.Sprintf("%.1f / %.1f KiB", float64(res.DirectAlloc)/1024, float64(res.DoorAlloc)/1024), "", "",
			fmt.Sprintf("the process's (client, engines, door) ÷ requests; the door's share: %.1f KiB, which paces its share of the collector's cycles", (float64(res.DoorAlloc)-float64(res.DirectAlloc))/1024)),
		benchtable.NewRow("requests/s direct / via door", fmt.Sprintf("%.0f / %.0f", rate(directN, res.DirectWall), rate(doorN, res.DoorWall)), "", "", "each mode's requests over its rounds' time"),
		benchtable.NewRow("cores busy direct / via door", fmt.Sprintf("%.2f / %.2f", cores(dCPU, res.DirectWall), cores(vCPU, res.DoorWall)), "", "",
			fmt.Sprintf("process CPU over wall time, of %d cores; near the count, requests queue for a core", runtime.NumCPU())),
		benchtable.NewRow("new connections in the measured rounds", fmt.Sprintf("%d / %d / %d", res.DialsDirect, res.DialsToDoor, res.DialsFromDoor), "", "",
			"clients→engines (direct) / clients→door / door→engines: 0 when the pools keep every stream's connection"),
		benchtable.NewRow("via door: client send → decision p50 / p99", p5099(sp.toDecision), "", "", "the HTTP server, reading and parsing the body"),
		benchtable.NewRow("via door: decision → request written to an engine p50 / p99", p5099(sp.toEngine), "", "", "the decision (in memory), the body, its write to the engine's connection"),
		benchtable.NewRow("via door: request written → first chunk read by the door p50 / p99", p5099(sp.engine), "", "", "the engine's TTFT, as the door's connection sees it"),
		benchtable.NewRow("via door: first chunk read → first token at the client p50 / p99", p5099(sp.relay), "", "", "the relay: the door's read, parse and write, and the client's wake-up"),
		benchtable.NewRow("via door: the door's own part of ttft p50 / p99", p5099(sp.door), "", "", "per request, the sum of the three rows that are not the engine's"),
		benchtable.NewRow("via door: the slowest 1% of the door's own part, mean of client → decision / decision → engine / relay", sp.tail(), "", "", "which of the door's stretches its p99 is made of"),
		benchtable.NewRow("door adds to ttft p50", added50.String(), "", "", "in-memory decider: the durable decision append is `bench api`'s"),
		benchtable.NewRow("door adds to ttft p50 / p99, 95% bootstrap intervals", fmt.Sprintf("[%s, %s] / [%s, %s]", lo50.Round(10*time.Microsecond), hi50.Round(10*time.Microsecond), lo99.Round(10*time.Microsecond), hi99.Round(10*time.Microsecond)), "", "",
			"what the difference could be, resampling the pairs of adjacent rounds: an interval wider than the bar cannot tell a door within it from one outside it (more --requests and --rounds narrow it; --aa measures the noise)"),
	}
	bar, verdict := "", ""
	if cfg.MaxAddedP99 > 0 {
		bar, verdict = "≤ "+cfg.MaxAddedP99.String(), benchtable.Verdict(added99 <= cfg.MaxAddedP99)
	}
	rows = append(rows, benchtable.NewRow("door adds to ttft p99", added99.String(), bar, verdict, ""))
	benchtable.Print(out, rows)
	return res, rows, nil
}

// sample is one request as its client saw it: when it was sent, its
// TTFT, and the request id the door answered (through the door).
type sample struct {
	sent      time.Time
	ttft      time.Duration
	requestID string
}

func ttfts(s []sample) []time.Duration {
	out := make([]time.Duration, len(s))
	for i := range s {
		out[i] = s[i].ttft
	}
	return out
}

// ttftSplit is the door's requests' TTFT split at the timeline's stamps.
type ttftSplit struct {
	toDecision, toEngine, engine, relay []time.Duration
	// door is each request's toDecision + toEngine + relay.
	door []time.Duration
}

func split(tl *timeline, s []sample) ttftSplit {
	var sp ttftSplit
	for _, x := range s {
		st, ok := tl.lookup(x.requestID)
		if !ok || st.decided.IsZero() || st.upstream.IsZero() || st.firstChunk.IsZero() {
			continue
		}
		a, b := st.decided.Sub(x.sent), st.upstream.Sub(st.decided)
		c, d := st.firstChunk.Sub(st.upstream), x.sent.Add(x.ttft).Sub(st.firstChunk)
		sp.toDecision, sp.toEngine = append(sp.toDecision, a), append(sp.toEngine, b)
		sp.engine, sp.relay = append(sp.engine, c), append(sp.relay, d)
		sp.door = append(sp.door, a+b+d)
	}
	return sp
}

// tail is the mean of each of the door's three stretches over the
// requests whose own part is in its slowest 1%.
func (sp ttftSplit) tail() string {
	if len(sp.door) == 0 {
		return "-"
	}
	idx := make([]int, len(sp.door))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(sp.door[b], sp.door[a]) })
	idx = idx[:max(1, len(idx)/100)]
	var a, b, c time.Duration
	for _, i := range idx {
		a, b, c = a+sp.toDecision[i], b+sp.toEngine[i], c+sp.relay[i]
	}
	n := time.Duration(len(idx))
	r := func(d time.Duration) time.Duration { return (d / n).Round(10 * time.Microsecond) }
	return fmt.Sprintf("%s / %s / %s", r(a), r(b), r(c))
}

// phase is one round of one mode: its requests as their clients saw
// them, and the process's CPU, wall time and heap allocation from its
// first request's send to the next phase's.
type phase struct {
	samples   []sample
	cpu, wall time.Duration
	// alloc is the bytes the process allocated on its heap.
	alloc uint64
}

// runPhases runs streams closed-loop clients, each sending its next
// streamed completion when the previous answer has ended, through
// 2×rounds phases of perPhase requests: request i (in send order) belongs
// to phase i/perPhase, sent to bases[phase%2]. The clients run on from one
// phase into the next: their sends stay spread as a serving fleet's are,
// instead of all 64 starting at once at each round (a burst whose first
// requests, an eighth of a round's, would be its slowest and so its p99).
// Before the measured phases each client sends one request each way
// (every pool holds a connection per client), then a warm-up of 2×streams
// requests per mode lets the clients' start burst pass; mark runs when the
// first measured request is sent.
func runPhases(ctx context.Context, client *http.Client, bases [2]func() string, body string, streams, perPhase, rounds int, mark func()) ([]phase, error) {
	warm := 2 * streams
	measured := 2 * rounds * perPhase
	total := 2*warm + measured
	type stamp struct {
		cpu   time.Duration
		wall  time.Time
		alloc uint64
	}
	var (
		mu     sync.Mutex
		phases = make([]phase, 2*rounds)
		starts = make([]stamp, 2*rounds+1)
		sent   atomic.Int64
		first  error
		wg     sync.WaitGroup
	)
	for range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each client first opens its connection to either side.
			for _, base := range bases {
				if _, err := once(ctx, client, base(), body); err != nil {
					mu.Lock()
					first = cmp.Or(first, err)
					mu.Unlock()
					return
				}
			}
			for ctx.Err() == nil {
				i := int(sent.Add(1) - 1)
				if i >= total {
					return
				}
				ph, mode := -1, i/warm%2
				if j := i - 2*warm; j >= 0 {
					ph = j / perPhase
					mode = ph % 2
					if j%perPhase == 0 {
						if j == 0 {
							mark()
						}
						mu.Lock()
						starts[ph] = stamp{cpuTime(), time.Now(), heapAllocated()}
						mu.Unlock()
					}
				}
				t, err := once(ctx, client, bases[mode](), body)
				mu.Lock()
				if err != nil && first == nil {
					first = err
				}
				if ph >= 0 && err == nil {
					phases[ph].samples = append(phases[ph].samples, t)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	starts[2*rounds] = stamp{cpuTime(), time.Now(), heapAllocated()}
	for i := range phases {
		phases[i].cpu = starts[i+1].cpu - starts[i].cpu
		phases[i].alloc = starts[i+1].alloc - starts[i].alloc
		phases[i].wall = starts[i+1].wall.Sub(starts[i].wall)
	}
	if first == nil {
		first = ctx.Err()
	}
	return phases, first
}

func once(ctx context.Context, client *http.Client, base, body string) (sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", strings.NewReader(body))
	if err != nil {
		return sample{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return sample{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return sample{}, fmt.Errorf("%s: %d %s", base, resp.StatusCode, b)
	}
	s := sample{sent: start, requestID: resp.Header.Get(door.HeaderRequestID)}
	br := bufio.NewReader(resp.Body)
	var ttft time.Duration
	for {
		line, err := br.ReadString('\n')
		if ttft == 0 && strings.HasPrefix(line, "data: {") {
			ttft = time.Since(start)
		}
		if err != nil {
			if err == io.EOF && ttft > 0 {
				s.ttft = ttft
				return s, nil
			}
			return sample{}, fmt.Errorf("%s: stream ended before a token: %v", base, err)
		}
	}
}

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

// roundRobin decides local on the engines in turn: the bench measures the
// door, not the decider.
type roundRobin struct {
	ups []Upstream
	n   atomic.Uint64
	tl  *timeline
}

func (r *roundRobin) Decide(_ context.Context, q door.DecideRequest) (door.Decision, error) {
	r.tl.decided(q.RequestID)
	u := r.ups[r.n.Add(1)%uint64(len(r.ups))]
	return door.Decision{DecisionID: "d-" + q.RequestID, RequestID: q.RequestID, Decode: door.Worker{ID: u.URL(), HTTPURL: u.URL()}}, nil
}

type fleet struct {
	ups   []Upstream
	model string
}

func (f fleet) Tokenizers(string) []string { return []string{f.ups[0].URL()} }
func (f fleet) Models() []string           { return []string{f.model} }

type discard struct{}

func (discard) AppendOutcome(context.Context, door.Outcome) error { return nil }

// requestBody is the streamed completion every request sends: token ids
// 1..PromptTokens as the prompt, exactly OutputTokens out.
func requestBody(cfg Config) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"model":%q,"prompt":[`, cfg.Model)
	for i := 1; i <= cfg.PromptTokens; i++ {
		if i > 1 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, i)
	}
	fmt.Fprintf(&b, `],"max_tokens":%d,"min_tokens":%d,"stream":true}`, cfg.OutputTokens, cfg.OutputTokens)
	return b.String()
}
