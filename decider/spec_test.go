package decider_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/decider/memview"
)

// TestSpec runs testdata/spec.txt: one case per rule and boundary of
// conditional-disagg.md, in a small line format (documented at the top of the file)
// that reads like the spec. Each case builds a memview, decides, and checks the named
// fields of the decision.
func TestSpec(t *testing.T) {
	cases := parseSpecFile(t, "testdata/spec.txt")
	if len(cases) < 40 {
		t.Fatalf("spec.txt has %d cases; expected the full rule set", len(cases))
	}
	seen := map[string]bool{}
	for _, c := range cases {
		if seen[c.name] {
			t.Fatalf("line %d: duplicate case name %q", c.line, c.name)
		}
		seen[c.name] = true
		t.Run(c.name, func(t *testing.T) { runSpecCase(t, c) })
	}
}

// TestSpecCoversEveryPolicy: every policy of the table has a section of spec cases
// (named policy/rule) that run under it, so a new policy comes with its spec, and
// every reason code is the expected outcome of some case.
func TestSpecCoversEveryPolicy(t *testing.T) {
	cases := parseSpecFile(t, "testdata/spec.txt")
	sections := map[string]int{}
	reasons := map[string]bool{}
	for _, c := range cases {
		section, _, _ := strings.Cut(c.name, "/")
		policy := decider.DefaultDisaggConfig().Policy
		for _, l := range c.lines {
			switch l.verb {
			case "disagg":
				d, err := decider.ParseDisaggConfig([]byte(l.args[0]))
				if err != nil {
					t.Fatalf("line %d: %v", l.line, err)
				}
				policy = d.Policy
			case "expect":
				for _, a := range l.args {
					if r, ok := strings.CutPrefix(a, "reason="); ok {
						reasons[r] = true
					}
				}
			}
		}
		if _, ok := decider.LookupPolicy(decider.Policy(section)); ok {
			if policy != decider.Policy(section) {
				t.Errorf("line %d: case %s runs under policy %s", c.line, c.name, policy)
			}
			sections[section]++
		}
	}
	for _, name := range decider.PolicyNames() {
		if sections[name] == 0 {
			t.Errorf("testdata/spec.txt has no case %s/...: add the spec of policy %s", name, name)
		}
	}
	for _, r := range decider.Reasons() {
		if !reasons[string(r)] {
			t.Errorf("testdata/spec.txt expects reason=%s of no case", r)
		}
	}
}

type specLine struct {
	line int
	verb string
	args []string
}

type specCase struct {
	name  string
	line  int
	lines []specLine
}

func parseSpecFile(t *testing.T, path string) []specCase {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cases []specCase
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		n++
		text := strings.TrimSpace(sc.Text())
		if i := strings.Index(text, " #"); i >= 0 {
			text = strings.TrimSpace(text[:i])
		}
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		verb, rest, _ := strings.Cut(text, " ")
		if verb == "case" {
			cases = append(cases, specCase{name: strings.TrimSpace(rest), line: n})
			continue
		}
		if len(cases) == 0 {
			t.Fatalf("%s:%d: %q before the first case", path, n, verb)
		}
		var args []string
		if verb == "disagg" {
			args = []string{strings.TrimSpace(rest)}
		} else {
			args = strings.Fields(rest)
		}
		c := &cases[len(cases)-1]
		c.lines = append(c.lines, specLine{line: n, verb: verb, args: args})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return cases
}

// specChain is the request's hash chain for a block size in spec cases: distinct per
// block size and position, like real chained hashes.
func specChain(blockSize int, prompt int64) []uint64 {
	n := int(prompt / int64(blockSize))
	h := make([]uint64, n)
	for i := range h {
		h[i] = uint64(blockSize)<<32 | uint64(i+1)
	}
	return h
}

func kv(t *testing.T, l specLine, args []string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			v = "true"
		}
		m[k] = v
	}
	return m
}

func atoi(t *testing.T, l specLine, s string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("line %d: %q is not an integer", l.line, s)
	}
	return v
}

func atof(t *testing.T, l specLine, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("line %d: %q is not a number", l.line, s)
	}
	return v
}

func runSpecCase(t *testing.T, c specCase) {
	cfg := decider.DefaultConfig()
	cfg.ConditionalDisagg = true
	view := memview.New()
	req := decider.Request{ID: "req-1", Model: "m"}
	noChains := false
	version := decider.Version
	blockSizes := map[string]int{}
	var expects, errorsWant []specLine
	var fit *decider.LatencyFit

	// Cache, active and load lines refer to the request's chain, so they run after the
	// request line is known.
	var deferred []specLine
	for _, l := range c.lines {
		switch l.verb {
		case "config":
			for k, v := range kv(t, l, l.args) {
				switch k {
				case "conditional_disagg":
					cfg.ConditionalDisagg = v == "true"
				case "router_mode":
					cfg.RouterMode = decider.RouterMode(v)
				case "kv_events":
					cfg.KVEvents = v == "true"
				case "queue_threshold":
					cfg.QueueThreshold = decider.Some(atof(t, l, v))
				case "credit":
					cfg.OverlapScoreCredit = atof(t, l, v)
				case "scale":
					cfg.PrefillLoadScale = atof(t, l, v)
				case "temperature":
					cfg.Temperature = atof(t, l, v)
				case "version":
					version = uint32(atoi(t, l, v))
				default:
					t.Fatalf("line %d: unknown config key %q", l.line, k)
				}
			}
		case "disagg":
			d, err := decider.ParseDisaggConfig([]byte(l.args[0]))
			if err != nil {
				t.Fatalf("line %d: %v", l.line, err)
			}
			cfg.Disagg = d
		case "worker":
			m := kv(t, l, l.args[1:])
			w := decider.WorkerInfo{ID: l.args[0], Model: "m", BlockSize: 16}
			for k, v := range m {
				switch k {
				case "pool":
					w.Pool = decider.Pool(v)
				case "model":
					w.Model = v
				case "block":
					w.BlockSize = int(atoi(t, l, v))
				case "total_kv":
					w.TotalKVBlocks = atoi(t, l, v)
				case "mnbt":
					w.MaxNumBatchedTokens = atoi(t, l, v)
				case "unavailable":
					w.Unavailable = true
				case "unhealthy":
					w.Unhealthy = true
				default:
					t.Fatalf("line %d: unknown worker key %q", l.line, k)
				}
			}
			view.Add(w)
			blockSizes[w.ID] = w.BlockSize
		case "request":
			for k, v := range kv(t, l, l.args) {
				switch k {
				case "id":
					req.ID = v
				case "model":
					req.Model = v
				case "prompt":
					req.PromptTokens = atoi(t, l, v)
				case "chains":
					noChains = v == "none"
				default:
					t.Fatalf("line %d: unknown request key %q", l.line, k)
				}
			}
		case "cache", "active", "load":
			deferred = append(deferred, l)
		case "fit":
			if fit == nil {
				fit = &decider.LatencyFit{}
				view.SetLatencyFit(fit)
			}
			specFit(t, l, fit)
		case "expect":
			expects = append(expects, l)
		case "error":
			errorsWant = append(errorsWant, l)
		default:
			t.Fatalf("line %d: unknown directive %q", l.line, l.verb)
		}
	}
	if !noChains {
		seen := map[int]bool{}
		for _, w := range view.Workers() {
			if w.BlockSize > 0 && !seen[w.BlockSize] {
				seen[w.BlockSize] = true
				req.Chains = append(req.Chains, decider.Chain{BlockSize: w.BlockSize, Hashes: specChain(w.BlockSize, req.PromptTokens)})
			}
		}
	}
	for _, l := range deferred {
		id := l.args[0]
		bs, ok := blockSizes[id]
		if !ok {
			t.Fatalf("line %d: unknown worker %q", l.line, id)
		}
		m := kv(t, l, l.args[1:])
		chain := specChain(bs, req.PromptTokens)
		take := func(from, n int64) []uint64 {
			if from+n > int64(len(chain)) {
				t.Fatalf("line %d: %d blocks from %d exceed the chain of %d complete blocks", l.line, n, from, len(chain))
			}
			return chain[from : from+n]
		}
		switch l.verb {
		case "cache":
			dev, host, disk := atoi(t, l, or(m["device"], "0")), atoi(t, l, or(m["host"], "0")), atoi(t, l, or(m["disk"], "0"))
			view.Store(id, memview.Device, take(0, dev)...)
			view.Store(id, memview.Host, take(dev, host)...)
			view.Store(id, memview.Disk, take(dev+host, disk)...)
		case "active":
			view.SetActive(id, decider.ActiveLoad{
				DecodeBlocks:   atoi(t, l, or(m["decode_blocks"], "0")),
				PrefillTokens:  atoi(t, l, or(m["prefill_tokens"], "0")),
				Requests:       atoi(t, l, or(m["requests"], "0")),
				RecentRequests: atoi(t, l, or(m["recent"], "0")),
			})
			view.MarkActive(id, take(0, atoi(t, l, or(m["shared"], "0")))...)
		case "load":
			view.SetLoad(id, decider.LoadSample{
				KVUsedBlocks:        atoi(t, l, or(m["kv_used"], "0")),
				ActivePrefillTokens: atoi(t, l, or(m["prefill_tokens"], "0")),
			})
		}
	}

	dc, err := decider.NewAt(cfg, version)
	if err != nil {
		t.Fatalf("line %d: config: %v", c.line, err)
	}
	d, err := dc.Decide(view, &req)
	if len(errorsWant) > 0 {
		want := errorsWant[0].args[0]
		var target error
		switch want {
		case "no_decode_worker":
			target = decider.ErrNoDecodeWorker
		case "invalid_request":
			target = decider.ErrInvalidRequest
		default:
			t.Fatalf("line %d: unknown error kind %q", errorsWant[0].line, want)
		}
		if !errors.Is(err, target) {
			t.Fatalf("line %d: want error %s, got %v", errorsWant[0].line, want, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("decide: %v", err)
	}
	for _, l := range expects {
		for _, a := range l.args {
			k, want, ok := strings.Cut(a, "=")
			if !ok {
				t.Fatalf("line %d: expect %q has no '='", l.line, a)
			}
			got, err := specField(d, k)
			if err != nil {
				t.Fatalf("line %d: %v", l.line, err)
			}
			if !sameValue(got, want) {
				js, _ := d.MarshalJSON()
				t.Errorf("line %d: %s = %s, want %s\ndecision: %s", l.line, k, got, want, js)
			}
		}
	}
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func sameValue(got, want string) bool {
	if got == want {
		return true
	}
	g, err1 := strconv.ParseFloat(got, 64)
	w, err2 := strconv.ParseFloat(want, 64)
	return err1 == nil && err2 == nil && g == w
}

func fmtF(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// specField reads one named field of a decision as a string.
func specField(d *decider.Decision, key string) (string, error) {
	switch key {
	case "mode":
		return string(d.Mode), nil
	case "reason":
		return string(d.Reason), nil
	case "decode":
		return d.DecodeWorker, nil
	case "prefill":
		return or(d.PrefillWorker, "-"), nil
	case "cached":
		return strconv.FormatInt(d.CachedTokens, 10), nil
	case "eff":
		return strconv.FormatInt(d.EffectiveISL, 10), nil
	case "ratio":
		return fmtF(d.Ratio), nil
	case "bypass":
		return strconv.FormatBool(d.PolicyBypass), nil
	case "decided_by":
		return string(d.DecidedBy), nil
	case "distance":
		return fmtF(d.Distance), nil
	case "block_size":
		return strconv.Itoa(d.BlockSize), nil
	case "rows":
		return strconv.Itoa(len(d.Candidates)), nil
	}
	if rest, ok := strings.CutPrefix(key, "slo."); ok {
		s := &d.SLO
		v := map[string]string{
			"evaluated": strconv.FormatBool(s.Evaluated), "warm": strconv.FormatBool(s.Warm),
			"samples": strconv.FormatInt(s.Samples, 10), "local_ttft": fmtF(s.LocalTTFTMs), "local_itl": fmtF(s.LocalITLMs),
			"remote_ttft": fmtF(s.RemoteTTFTMs), "remote_itl": fmtF(s.RemoteITLMs), "others_itl": fmtF(s.OthersITLMs),
			"others_base_itl": fmtF(s.OthersBaseITLMs), "local_goodput": fmtF(s.LocalGoodput),
			"remote_goodput": fmtF(s.RemoteGoodput), "margin": fmtF(s.Margin), "running": strconv.FormatInt(s.RunningRequests, 10),
			"next_ttft": fmtF(s.NextTTFTMs), "next_itl": fmtF(s.NextITLMs), "remote_decode_ttft": fmtF(s.RemoteDecodeTTFTMs),
			"local_delay_charge": fmtF(s.LocalDelayCharge), "remote_delay_charge": fmtF(s.RemoteDelayCharge),
			"typical_ttft": fmtF(s.TypicalTTFTMs),
		}
		if got, ok := v[rest]; ok {
			return got, nil
		}
		return "", fmt.Errorf("unknown slo field %q", rest)
	}
	if rest, ok := strings.CutPrefix(key, "check."); ok {
		name, field, _ := strings.Cut(rest, ".")
		var c decider.Check
		switch name {
		case "eff_isl":
			c = d.EffISLCheck
		case "ratio":
			c = d.RatioCheck
		case "prefill_busy":
			c = d.PrefillBusy
		case "decode_busy":
			c = d.DecodeBusy
		default:
			return "", fmt.Errorf("unknown check %q", name)
		}
		switch field {
		case "evaluated":
			return strconv.FormatBool(c.Evaluated), nil
		case "known":
			return strconv.FormatBool(c.Known), nil
		case "value":
			return fmtF(c.Value), nil
		case "limit":
			return fmtF(c.Limit), nil
		case "hit":
			return strconv.FormatBool(c.Hit), nil
		case "note":
			return or(c.Note, "-"), nil
		}
		return "", fmt.Errorf("unknown check field %q", field)
	}
	field, worker, ok := strings.Cut(key, ".")
	if !ok {
		return "", fmt.Errorf("unknown expect key %q", key)
	}
	var row *decider.Candidate
	for i := range d.Candidates {
		if d.Candidates[i].Worker == worker {
			row = &d.Candidates[i]
		}
	}
	if row == nil {
		if field == "row" {
			return "false", nil
		}
		return "", fmt.Errorf("no candidate row for worker %q", worker)
	}
	switch field {
	case "row":
		return "true", nil
	case "cost":
		return fmtF(row.Cost), nil
	case "prefill_term":
		return fmtF(row.PrefillTerm), nil
	case "raw":
		return fmtF(row.RawPrefillBlocks), nil
	case "credit":
		return fmtF(row.OverlapCredit), nil
	case "potential":
		return strconv.FormatInt(row.PotentialDecodeBlocks, 10), nil
	case "request_blocks":
		return strconv.FormatInt(row.RequestBlocks, 10), nil
	case "shared":
		return strconv.FormatInt(row.SharedActiveBlocks, 10), nil
	case "overlap":
		return strconv.Itoa(row.OverlapBlocks), nil
	case "host":
		return strconv.Itoa(row.HostBlocks), nil
	case "disk":
		return strconv.Itoa(row.DiskBlocks), nil
	case "eligible":
		return strconv.FormatBool(row.Eligible), nil
	case "excluded":
		return or(row.Excluded, "-"), nil
	case "picked":
		return strconv.FormatBool(row.Picked), nil
	case "probability":
		return fmtF(row.Probability), nil
	}
	return "", fmt.Errorf("unknown candidate field %q", field)
}

// specFit reads "fit PATH TARGET samples=N sigma=S c=c0,c1,...": one path and target of
// the latency model fit the view serves (coefficients in the order of
// decider.LatencyInputs.Vector, missing ones 0).
func specFit(t *testing.T, l specLine, fit *decider.LatencyFit) {
	t.Helper()
	if len(l.args) < 2 {
		t.Fatalf("line %d: fit needs PATH TARGET", l.line)
	}
	path := map[string]decider.LatencyPath{"local": decider.PathLocal, "remote": decider.PathRemote}
	target := map[string]decider.LatencyTarget{"ttft": decider.TargetTTFT, "itl": decider.TargetITL}
	p, ok1 := path[l.args[0]]
	tg, ok2 := target[l.args[1]]
	if !ok1 || !ok2 {
		t.Fatalf("line %d: fit %s %s: want local|remote ttft|itl", l.line, l.args[0], l.args[1])
	}
	for k, v := range kv(t, l, l.args[2:]) {
		switch k {
		case "samples":
			fit.Samples[p][tg] = atoi(t, l, v)
		case "sigma":
			fit.Sigma[p][tg] = atof(t, l, v)
		case "mean":
			fit.Mean[p][tg] = atof(t, l, v)
		case "c":
			for i, c := range strings.Split(v, ",") {
				if i >= decider.LatencyK {
					t.Fatalf("line %d: more than %d coefficients", l.line, decider.LatencyK)
				}
				fit.Coef[p][tg][i] = atof(t, l, c)
			}
		default:
			t.Fatalf("line %d: unknown fit key %q", l.line, k)
		}
	}
}
