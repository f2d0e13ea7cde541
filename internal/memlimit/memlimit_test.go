package memlimit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeCgroup writes cgroup files under a temporary root: files maps a path
// below the root to its content, and self is /proc/self/cgroup's content.
func fakeCgroup(t *testing.T, self string, files map[string]string) Deps {
	t.Helper()
	root := t.TempDir()
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	selfPath := filepath.Join(root, "self-cgroup")
	if err := os.WriteFile(selfPath, []byte(self), 0o644); err != nil {
		t.Fatal(err)
	}
	return Deps{Env: func(string) (string, bool) { return "", false }, CgroupRoot: root, SelfCgroup: selfPath}
}

// frac is AutoFraction of n, as Plan computes it.
func frac(n int64) int64 { return int64(float64(n) * AutoFraction) }

func TestPlan(t *testing.T) {
	const gib = 1 << 30
	v2 := map[string]string{"memory.max": "4294967296"}
	for _, tc := range []struct {
		name      string
		cfg       Config
		deps      func(t *testing.T) Deps
		env       map[string]string
		limit     int64
		limitFrom string
		gc        int
		gcFrom    string
		err       string
	}{
		{name: "v2 at the root (cgroup namespace)", cfg: Config{"auto", 400}, deps: func(t *testing.T) Deps { return fakeCgroup(t, "0::/\n", v2) },
			limit: frac(4 * gib), limitFrom: "cgroup", gc: 400, gcFrom: "flag"},
		{name: "v2 in a nested group", cfg: Config{"auto", 400}, deps: func(t *testing.T) Deps {
			return fakeCgroup(t, "0::/kubepods/pod1/c1\n", map[string]string{"kubepods/pod1/c1/memory.max": "2147483648", "memory.max": "max"})
		}, limit: frac(2 * gib), limitFrom: "cgroup", gc: 400, gcFrom: "flag"},
		{name: "v1 group named by /proc/self/cgroup", cfg: Config{"auto", 300}, deps: func(t *testing.T) Deps {
			return fakeCgroup(t, "4:memory:/process_api/abc\n1:cpu:/\n0::/\n", map[string]string{
				"memory/process_api/abc/memory.limit_in_bytes": "1073741824", "memory/memory.limit_in_bytes": "9223372036854771712"})
		}, limit: frac(gib), limitFrom: "cgroup", gc: 300, gcFrom: "flag"},
		{name: "v1 unlimited", cfg: Config{"auto", 400}, deps: func(t *testing.T) Deps {
			return fakeCgroup(t, "4:memory:/\n", map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712"})
		}, gc: 100, gcFrom: "default"},
		{name: "v2 max", cfg: Config{"auto", 400}, deps: func(t *testing.T) Deps { return fakeCgroup(t, "0::/\n", map[string]string{"memory.max": "max"}) },
			gc: 100, gcFrom: "default"},
		{name: "no cgroup files", cfg: Config{"auto", 400}, deps: func(t *testing.T) Deps { return fakeCgroup(t, "", nil) },
			gc: 100, gcFrom: "default"},
		{name: "none ignores the cgroup", cfg: Config{"none", 400}, deps: func(t *testing.T) Deps { return fakeCgroup(t, "0::/\n", v2) },
			gc: 100, gcFrom: "default"},
		{name: "explicit size", cfg: Config{"3.5GiB", 250}, deps: func(t *testing.T) Deps { return fakeCgroup(t, "0::/\n", v2) },
			limit: int64(3.5 * gib), limitFrom: "flag", gc: 250, gcFrom: "flag"},
		{name: "GOGC wins", cfg: Config{"auto", 400}, deps: func(t *testing.T) Deps { return fakeCgroup(t, "0::/\n", v2) }, env: map[string]string{"GOGC": "150"},
			limit: frac(4 * gib), limitFrom: "cgroup", gc: 150, gcFrom: "GOGC"},
		{name: "GOGC off", cfg: Config{"none", 400}, deps: func(t *testing.T) Deps { return fakeCgroup(t, "", nil) }, env: map[string]string{"GOGC": "off"},
			gc: -1, gcFrom: "GOGC"},
		{name: "bad size", cfg: Config{"lots", 400}, deps: func(t *testing.T) Deps { return fakeCgroup(t, "", nil) }, err: `--memory-limit "lots": want a size`},
		{name: "tiny size", cfg: Config{"512KiB", 400}, deps: func(t *testing.T) Deps { return fakeCgroup(t, "", nil) }, err: "want between 1MiB and 1PiB"},
		{name: "negative percent", cfg: Config{"auto", -5}, deps: func(t *testing.T) Deps { return fakeCgroup(t, "", nil) }, err: "--gc-percent -5: want ≥ 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.deps(t)
			d.Env = func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
			r, err := Plan(tc.cfg, d)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := Result{Limit: tc.limit, LimitFrom: tc.limitFrom, GCPercent: tc.gc, GCFrom: tc.gcFrom}
			if r != want {
				t.Fatalf("got %+v, want %+v", r, want)
			}
		})
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"1MiB": 1 << 20, "2048 MiB": 2 << 30, "1.5gib": 3 << 29, "1073741824": 1 << 30, "3GiB": 3 << 30, "100000000B": 1e8} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "GiB", "-1GiB", "NaN", "1e300", "12 parsecs"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) accepted", in)
		}
	}
}
