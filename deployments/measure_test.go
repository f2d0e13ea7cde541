package deployments

// Sizing measurements behind deployments/README.md#sizing. They take about a
// minute and need the real broker, so they run only when asked:
//
//	cd deployments && PDR_MEASURE=1 PDR_TEST_BROKERS=127.0.0.1:39092 go test . -run Measure -v

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/events"
	"github.com/pdrouter/pdrouter/internal/addrfile"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
	"github.com/pdrouter/pdrouter/statestore/storebench"
)

func measuring(t *testing.T) {
	if os.Getenv("PDR_MEASURE") == "" {
		t.Skip("sizing measurement: set PDR_MEASURE=1 to run it")
	}
}

func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// TestMeasureStoreBytesOnDisk: Pebble bytes per cached (block, worker)
// entry, for the emptyDir size (the in-memory figures come from
// `pdrouter bench store`).
func TestMeasureStoreBytesOnDisk(t *testing.T) {
	measuring(t)
	names := events.Names{}
	w := storebench.NewWorkload(names, 128, 16, 2)
	recs, _ := w.Records(1_000_000, 0)
	dir := t.TempDir()
	s, err := storebench.OpenStore(filepath.Join(dir, "store"), names)
	if err != nil {
		t.Fatal(err)
	}
	if err := storebench.ApplyAll(s, w.Registrations()); err != nil {
		t.Fatal(err)
	}
	if err := storebench.ApplyAll(s, recs); err != nil {
		t.Fatal(err)
	}
	entries := s.MemoryStats().Entries
	snap := filepath.Join(dir, "snap")
	if _, err := s.Checkpoint(snap); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	st, sn := dirSize(filepath.Join(dir, "store")), dirSize(snap)
	t.Logf("%d entries: store %.1f MB on disk = %.1f B/entry; snapshot %.1f MB = %.1f B/entry",
		entries, float64(st)/1e6, float64(st)/float64(entries), float64(sn)/1e6, float64(sn)/float64(entries))
}

// TestMeasureDecisionCost: router CPU per decision end to end (HTTP, hashing,
// decider, the audit append, reading the decision back), and the CPU a
// passive replica spends applying each decision another replica made.
func TestMeasureDecisionCost(t *testing.T) {
	measuring(t)
	brokers := kafkatest.Brokers(t)
	prefix := kafkatest.Prefix(t)
	kafkatest.Migrate(t, brokers, prefix)
	start := func() (string, *exec.Cmd) {
		addrFile := filepath.Join(t.TempDir(), "addr.json")
		cmd := exec.Command(pdrouterBinary(t), "serve", "--brokers", strings.Join(brokers, ","), "--topic-prefix", prefix,
			"--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--addr-file", addrFile, "--router-conditional-disagg", "--log-level", "warn")
		cmd.Env = cleanEnv()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		a, err := addrfile.Wait(ctx, addrFile, 20*time.Millisecond, nil)
		if err != nil {
			t.Fatal(err)
		}
		addr := a.HTTP
		if err := waitReady("http://"+addr, 60*time.Second); err != nil {
			t.Fatal(err)
		}
		return "http://" + addr, cmd
	}
	api, _ := start()
	passive, _ := start()
	const decode, prefill, groups = 128, 32, 16
	for i := range decode {
		must(t, postJSON(api+"/v1/workers", fmt.Sprintf(`{"worker_id":"d%d","pool":"decode","model":"m","block_size":16,"total_kv_blocks":100000}`, i), http.StatusAccepted, nil))
	}
	for i := range prefill {
		must(t, postJSON(api+"/v1/workers", fmt.Sprintf(`{"worker_id":"p%d","pool":"prefill","model":"m","block_size":16}`, i), http.StatusAccepted, nil))
	}
	// Each decode worker caches the 64-block system prompt of its group.
	for i := range decode {
		toks, hashes := make([]int, 1024), make([]int, 64)
		for j := range toks {
			toks[j] = (i%groups)*100000 + j
		}
		for j := range hashes {
			hashes[j] = i*1000 + j + 1
		}
		body := fmt.Sprintf(`{"worker_id":"d%d","ts":%d,"events":[{"type":"stored","block_hashes":%s,"parent_block_hash":null,"token_ids":%s,"block_size":16,"medium":"GPU"}]}`,
			i, time.Now().Unix(), jsonString(hashes), jsonString(toks))
		must(t, postJSON(api+"/v1/events/kv", body, http.StatusAccepted, nil))
	}
	time.Sleep(2 * time.Second)
	a0, p0 := cpuSeconds(t, api), cpuSeconds(t, passive)
	var n atomic.Int64
	began := time.Now()
	stop := began.Add(10 * time.Second)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(stop); i++ {
				toks := make([]int, 1024+16*(i%32))
				for j := range toks {
					toks[j] = ((g+i)%groups)*100000 + j
					if j >= 1024 {
						toks[j] = 5_000_000 + g*100_000 + i*100 + j
					}
				}
				if err := postJSON(api+"/v1/route", fmt.Sprintf(`{"request_id":"m-%d-%d","token_ids":%s}`, g, i, jsonString(toks)), http.StatusOK, nil); err != nil {
					t.Error(err)
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	el := time.Since(began)
	time.Sleep(time.Second) // the passive replica applies the tail
	a1, p1 := cpuSeconds(t, api), cpuSeconds(t, passive)
	d := float64(n.Load())
	t.Logf("%d decisions in %s (%.0f/s, 16 clients; %d decode + %d prefill workers; 1,024-1,520-token prompts)", n.Load(), el.Round(time.Millisecond), d/el.Seconds(), decode, prefill)
	t.Logf("deciding replica: %.0f µs CPU per decision (%.0f decisions per core-second)", (a1-a0)*1e6/d, d/(a1-a0))
	t.Logf("passive replica:  %.0f µs CPU per decision applied from the log", (p1-p0)*1e6/d)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func cpuSeconds(t *testing.T, api string) float64 {
	t.Helper()
	resp, err := http.Get(api + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "process_cpu_seconds_total "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("%s/metrics has no process_cpu_seconds_total", api)
	return 0
}
