package statestore

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/decider"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of testdata/*.txt")

// TestSpec runs the data-driven specs in testdata/*.txt. A spec is a list
// of commands, one a line; lines of events start with "> ", queries with
// "? " and are followed by their expected output, up to a blank line.
// Lines starting with "#" are prose. See testdata/prefix.txt for the
// command reference. Run with -rewrite to regenerate expected output
// (then read the diff: it is the spec).
func TestSpec(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.txt")
	if len(files) == 0 {
		t.Fatal("no spec files")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) { runSpec(t, f) })
	}
}

type specRunner struct {
	h   *harness
	bs  map[string]int // block size per worker id
	now int64          // event time, seconds, of the last "at="
}

func runSpec(t *testing.T, path string) {
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := &specRunner{h: newHarness(t, 4), bs: map[string]int{}}
	r.h.opts.ActiveExpiry = 300 * time.Second
	var out strings.Builder
	lines := strings.Split(string(raw), "\n")
	failed := false
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		out.WriteString(line + "\n")
		switch {
		case strings.HasPrefix(line, "> "):
			if err := r.event(strings.Fields(line[2:])); err != nil {
				t.Fatalf("%s:%d: %v", path, i+1, err)
			}
		case strings.HasPrefix(line, "? "):
			got, err := r.query(strings.Fields(line[2:]))
			if err != nil {
				t.Fatalf("%s:%d: %v", path, i+1, err)
			}
			var want []string
			for i+1 < len(lines) && strings.TrimSpace(lines[i+1]) != "" {
				i++
				want = append(want, lines[i])
			}
			if strings.Join(want, "\n") != strings.Join(got, "\n") {
				failed = true
				if !*rewrite {
					t.Errorf("%s:%d: %s\n got:\n%s\nwant:\n%s", path, i+1, line, strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
			}
			for _, g := range got {
				out.WriteString(g + "\n")
			}
		}
	}
	if *rewrite && failed {
		s := strings.TrimSuffix(out.String(), "\n")
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// args parses "k=v" fields after the positional ones.
func args(f []string) (pos []string, kv map[string]string) {
	kv = map[string]string{}
	for _, x := range f {
		if k, v, ok := strings.Cut(x, "="); ok {
			kv[k] = v
		} else {
			pos = append(pos, x)
		}
	}
	return pos, kv
}

func workerArg(s string) (string, uint32) {
	id, r, ok := strings.Cut(s, "/")
	if !ok {
		return id, 0
	}
	n, _ := strconv.Atoi(strings.TrimPrefix(r, "dp"))
	return id, uint32(n)
}

func hashes(s string) []uint64 {
	var out []uint64
	for _, x := range strings.Split(s, ",") {
		if x == "" {
			continue
		}
		n, _ := strconv.ParseUint(x, 10, 64)
		out = append(out, n)
	}
	return out
}

// blocksArg parses "X:a-b" (or "X:a").
func blocksArg(s string) (string, int, int, error) {
	text, rng, ok := strings.Cut(s, ":")
	if !ok {
		return "", 0, 0, fmt.Errorf("blocks=%q: want TEXT:FROM-TO", s)
	}
	a, b, ok := strings.Cut(rng, "-")
	if !ok {
		b = a
	}
	from, err1 := strconv.Atoi(a)
	to, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil {
		return "", 0, 0, fmt.Errorf("blocks=%q: bad range", s)
	}
	return text, from, to, nil
}

func tierArg(s string) pb.Tier {
	switch s {
	case "host":
		return pb.Tier_TIER_HOST
	case "disk":
		return pb.Tier_TIER_DISK
	case "unspecified":
		return pb.Tier_TIER_UNSPECIFIED
	}
	return pb.Tier_TIER_DEVICE
}

func (r *specRunner) at(kv map[string]string) int64 {
	if v, ok := kv["at"]; ok {
		n, _ := strconv.ParseInt(v, 10, 64)
		r.now = n
	}
	return r.now * int64(time.Second)
}

func (r *specRunner) blockSize(id string, kv map[string]string) int {
	if v, ok := kv["bs"]; ok {
		n, _ := strconv.Atoi(v)
		return n
	}
	if n, ok := r.bs[id]; ok {
		return n
	}
	return 4
}

func (r *specRunner) event(f []string) error {
	pos, kv := args(f)
	if len(pos) < 1 {
		return fmt.Errorf("empty command")
	}
	h := r.h
	switch pos[0] {
	case "register":
		bs, _ := strconv.Atoi(kv["bs"])
		dp, _ := strconv.Atoi(kv["dp"])
		pool := pb.Pool_POOL_DECODE
		if pos[2] == "prefill" {
			pool = pb.Pool_POOL_PREFILL
		}
		reg := registration(pos[1], pool, uint32(bs), uint32(dp))
		if v, ok := kv["total"]; ok {
			n, _ := strconv.ParseUint(v, 10, 64)
			reg.TotalKvBlocks = &n
		}
		r.bs[pos[1]] = bs
		h.put(pos[1], reg)
	case "tombstone":
		h.put(pos[1], nil)
	case "store", "remove", "clear", "reset":
		id, rank := workerArg(pos[1])
		var ev *pb.KvEvent
		switch pos[0] {
		case "store":
			bs := r.blockSize(id, kv)
			var toks []uint32 // none without blocks=: an offload store
			if v, ok := kv["blocks"]; ok {
				text, from, to, err := blocksArg(v)
				if err != nil {
					return err
				}
				toks = tokens(text, from, to, bs)
			}
			var parent *uint64
			if v, ok := kv["parent"]; ok {
				n, _ := strconv.ParseUint(v, 10, 64)
				parent = &n
			}
			ev = stored(tierArg(kv["tier"]), parent, hashes(kv["eng"]), toks, bs)
		case "remove":
			ev = removed(tierArg(kv["tier"]), hashes(kv["eng"])...)
		case "clear":
			ev = clearedEv()
		case "reset":
			ev = resetEv()
		}
		h.put(id, kvRec(id, rank, r.at(kv), ev))
	case "load":
		id, rank := workerArg(pos[1])
		used, _ := strconv.ParseUint(kv["used"], 10, 64)
		ls := &pb.LoadSample{Worker: &pb.WorkerRef{WorkerId: id, DpRank: rank}, SampleTimeUnixNano: r.at(kv), KvUsedBlocks: &used}
		for name, f := range map[string]**uint64{"running": &ls.NumRequestsRunning, "waiting": &ls.NumRequestsWaiting} {
			if v, ok := kv[name]; ok {
				n, _ := strconv.ParseUint(v, 10, 64)
				*f = &n
			}
		}
		h.put(id, ls)
	case "decide", "local-decide":
		d := &pb.DecisionRecord{DecisionId: pos[1], RequestId: kv["req"], Mode: kv["mode"], DecidedAtUnixNano: r.at(kv), ReplicaId: kv["replica"]}
		if d.Mode == "" {
			d.Mode = "remote"
		}
		did, drank := workerArg(kv["decode"])
		d.DecodeWorker = &pb.WorkerRef{WorkerId: did, DpRank: drank}
		bs := r.blockSize(did, kv)
		p, _ := strconv.Atoi(kv["prompt"])
		d.PromptTokens = uint32(p)
		eff, _ := strconv.Atoi(kv["eff"])
		d.EffectiveIsl = uint32(eff)
		d.Candidates = append(d.Candidates, &pb.Candidate{Worker: d.DecodeWorker, Pool: pb.Pool_POOL_DECODE, BlockSize: uint32(bs)})
		if v := kv["prefill"]; v != "" {
			pid, prank := workerArg(v)
			d.PrefillWorker = &pb.WorkerRef{WorkerId: pid, DpRank: prank}
			ov, _ := strconv.Atoi(kv["prefill_overlap"])
			d.Candidates = append(d.Candidates, &pb.Candidate{Worker: d.PrefillWorker, Pool: pb.Pool_POOL_PREFILL, BlockSize: uint32(r.blockSize(pid, kv)), OverlapBlocks: uint32(ov)})
		}
		if v := kv["blocks"]; v != "" {
			text, _, to, err := blocksArg(v)
			if err != nil {
				return err
			}
			d.Chains = []*pb.HashChain{{BlockSize: uint32(bs), BlockHashes: chainOf(text, to, bs)}}
		}
		if pos[0] == "local-decide" {
			return h.s.RecordLocalDecision(d)
		}
		h.put(did, d)
	case "outcome":
		kinds := map[string]pb.OutcomeEvent_Kind{"prefill_done": pb.OutcomeEvent_KIND_PREFILL_DONE, "completed": pb.OutcomeEvent_KIND_COMPLETED, "cancelled": pb.OutcomeEvent_KIND_CANCELLED}
		o := &pb.OutcomeEvent{RequestId: kv["req"], Kind: kinds[kv["kind"]], EventTimeUnixNano: r.at(kv)}
		if pos[1] != "-" {
			o.DecisionId = pos[1]
		}
		h.put(kv["decode"], o)
	case "shares":
		// shares WRITER seq=N at=S WORKER:blocks/requests/prefill/recent/recent_local...
		s := &pb.LoadShares{WriterId: pos[1], ClockUnixNano: r.at(kv)}
		s.Seq, _ = strconv.ParseUint(kv["seq"], 10, 64)
		for _, w := range pos[2:] {
			id, counts, _ := strings.Cut(w, ":")
			var c [5]uint64
			for i, x := range strings.SplitN(counts, "/", 5) {
				c[i], _ = strconv.ParseUint(x, 10, 64)
			}
			wid, rank := workerArg(id)
			s.Shares = append(s.Shares, &pb.WorkerShare{Worker: &pb.WorkerRef{WorkerId: wid, DpRank: rank}, DecodeBlocks: c[0],
				Requests: uint32(c[1]), PrefillTokens: c[2], RecentDecisions: uint32(c[3]), RecentLocalTokens: c[4]})
		}
		h.put(pos[1], s)
	case "tick":
		// Advance the event-time clock with a record that changes nothing
		// else: an outcome for an unknown request at the given time (it
		// leaves a pending entry that the digest sees, which is fine).
		h.put("clock", &pb.OutcomeEvent{RequestId: "tick-" + kv["at"], Kind: pb.OutcomeEvent_KIND_CANCELLED, EventTimeUnixNano: r.at(kv)})
	case "reopen":
		h.reopen()
	case "options":
		// Store options, then reopen: first thing in a file.
		secs := func(k string) time.Duration {
			n, _ := strconv.ParseInt(kv[k], 10, 64)
			return time.Duration(n) * time.Second
		}
		for k, v := range kv {
			switch k {
			case "approximate":
				h.opts.Approximate = v == "true"
			case "ttl":
				h.opts.ApproximateTTL = secs(k)
			case "retention":
				h.opts.DecisionRetention = secs(k)
			case "kv_missing_after":
				h.opts.KvEventsMissingAfter = secs(k)
			case "max_local":
				h.opts.MaxLocalDecisions, _ = strconv.Atoi(v)
			case "source":
				if v != "load-shares" {
					return fmt.Errorf("source=%s: only load-shares", v)
				}
				h.opts.Source = SourceLoadShares
			case "replica":
				h.opts.ReplicaID = v
			case "expiry":
				h.opts.ActiveExpiry = secs(k)
			default:
				return fmt.Errorf("unknown option %q", k)
			}
		}
		h.reopen()
	default:
		return fmt.Errorf("unknown command %q", pos[0])
	}
	return nil
}

func (r *specRunner) query(f []string) ([]string, error) {
	pos, kv := args(f)
	h := r.h
	var out []string
	switch pos[0] {
	case "match", "match-active":
		text, _, to, err := blocksArg(kv["blocks"])
		if err != nil {
			return nil, err
		}
		bs, _ := strconv.Atoi(kv["bs"])
		chain := chainOf(text, to, bs)
		h.s.Read(func(v View) {
			ws := v.Workers()
			if pos[0] == "match" {
				dst := make([]decider.TierOverlap, len(ws))
				v.MatchPrefix(bs, chain, dst)
				for i, w := range ws {
					if w.BlockSize == bs {
						out = append(out, fmt.Sprintf("%s device=%d host=%d disk=%d", w.ID, dst[i].Device, dst[i].Host, dst[i].Disk))
					}
				}
				return
			}
			dst := make([]int, len(ws))
			v.MatchActive(bs, chain, dst)
			for i, w := range ws {
				if w.BlockSize == bs {
					out = append(out, fmt.Sprintf("%s active_prefix=%d", w.ID, dst[i]))
				}
			}
		})
	case "workers":
		h.s.Read(func(v View) {
			for i, w := range v.Workers() {
				b := v.BlocksHeld(i)
				a := v.Active(i)
				s := fmt.Sprintf("%s %s bs=%d blocks=%d/%d/%d decode_blocks=%d prefill_tokens=%d", w.ID, w.Pool, w.BlockSize, b[0], b[1], b[2], a.DecodeBlocks, a.PrefillTokens)
				if li, ok := v.LoadInfo(i); ok {
					s += fmt.Sprintf(" load_used=%d load_age=%s", li.Sample.GetKvUsedBlocks(), li.Age)
				}
				out = append(out, s)
			}
		})
	case "active":
		h.s.Read(func(v View) {
			for i, w := range v.Workers() {
				a := v.Active(i)
				out = append(out, fmt.Sprintf("%s blocks=%d requests=%d prefill=%d recent=%d recent_local=%d", w.ID,
					a.DecodeBlocks, a.Requests, a.PrefillTokens, a.RecentRequests, a.RecentLocalPrefill))
			}
		})
	case "metrics":
		mfs, err := h.reg.Gather()
		if err != nil {
			return nil, err
		}
		for _, mf := range mfs {
			for _, name := range pos[1:] {
				if mf.GetName() != name {
					continue
				}
				for _, m := range mf.GetMetric() {
					out = append(out, name+labels(m)+" "+strconv.FormatFloat(value(m), 'g', -1, 64))
				}
			}
		}
	case "decision", "decision-for":
		var sd StoredDecision
		var ok bool
		if pos[0] == "decision" {
			sd, ok = h.s.Decision(pos[1])
		} else {
			sd, ok = h.s.DecisionForRequest(pos[1])
			d := sd.Record
			// The record-free path must name the same decision and workers.
			ref, refOK := h.s.DecisionRefForRequest(pos[1])
			if refOK != ok || ok && (ref.DecisionID != d.GetDecisionId() || !proto.Equal(ref.DecodeWorker, d.GetDecodeWorker()) ||
				!proto.Equal(ref.PrefillWorker, d.GetPrefillWorker())) {
				return []string{fmt.Sprintf("DecisionRefForRequest disagrees: %+v, %v", ref, refOK)}, nil
			}
		}
		if !ok {
			return []string{"none"}, nil
		}
		d := sd.Record
		prefill := ""
		if d.GetPrefillWorker() != nil {
			prefill = " prefill=" + d.GetPrefillWorker().GetWorkerId()
		}
		out = append(out, fmt.Sprintf("%s req=%s decode=%s%s mode=%s at=%s replica=%s", d.GetDecisionId(), d.GetRequestId(),
			d.GetDecodeWorker().GetWorkerId(), prefill, d.GetMode(), time.Duration(d.GetDecidedAtUnixNano()), d.GetReplicaId()))
	case "kv-missing":
		h.s.Read(func(v View) {
			for i, w := range v.Workers() {
				if m, note := v.KvEventsMissing(i); m {
					out = append(out, fmt.Sprintf("%s missing: %s", w.ID, note))
				} else {
					out = append(out, fmt.Sprintf("%s ok", w.ID))
				}
			}
		})
	case "kv-block-size":
		h.s.Read(func(v View) {
			for i, w := range v.Workers() {
				bs, m, note := v.KvBlockSize(i)
				if m {
					out = append(out, fmt.Sprintf("%s mismatch events_bs=%d: %s", w.ID, bs, note))
				} else {
					out = append(out, fmt.Sprintf("%s ok events_bs=%d", w.ID, bs))
				}
			}
		})
	case "replay":
		// The digest of a replay of the whole log, partitions interleaved in
		// several random orders, equals the store's.
		want := h.digest()
		for seed := uint64(1); seed <= 3; seed++ {
			got := replayDigest(h.t, h.log, rand.New(rand.NewPCG(seed, 7)), h.opts)
			if got.Hash != want.Hash {
				return []string{fmt.Sprintf("replay seed %d: digest %s, store %s", seed, got, want)}, nil
			}
		}
		out = append(out, "same digest")
	}
	return out, nil
}

func labels(m *dto.Metric) string {
	if len(m.GetLabel()) == 0 {
		return ""
	}
	var p []string
	for _, l := range m.GetLabel() {
		p = append(p, l.GetName()+"="+l.GetValue())
	}
	return "{" + strings.Join(p, ",") + "}"
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return 0
}
