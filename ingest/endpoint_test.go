package ingest

import "testing"

func TestOffsetEndpoint(t *testing.T) {
	for _, c := range []struct {
		ep   string
		rank int
		want string
	}{
		{"tcp://*:5557", 0, "tcp://*:5557"},
		{"tcp://*:5557", 3, "tcp://*:5560"},
		{"tcp://10.0.0.5:5557", 1, "tcp://10.0.0.5:5558"},
		{"tcp://[::1]:5557", 2, "tcp://[::1]:5559"},
		{"inproc://kv", 2, "inproc://kv_dp2"},
		{"ipc:///tmp/kv", 0, "ipc:///tmp/kv"},
	} {
		got, err := OffsetEndpoint(c.ep, c.rank)
		if err != nil || got != c.want {
			t.Errorf("OffsetEndpoint(%q, %d) = %q, %v; want %q", c.ep, c.rank, got, err, c.want)
		}
	}
	for _, bad := range []struct {
		ep   string
		rank int
	}{{"ipc:///tmp/kv", 1}, {"tcp://host", 1}, {"tcp://host:x", 1}, {"tcp://h:65535", 1}, {"tcp://h:1", -1}} {
		if got, err := OffsetEndpoint(bad.ep, bad.rank); err == nil {
			t.Errorf("OffsetEndpoint(%q, %d) = %q, want an error", bad.ep, bad.rank, got)
		}
	}
}

func TestEngineBinds(t *testing.T) {
	for ep, want := range map[string]bool{
		"tcp://*:5557": true, "tcp://[::]:5557": true, "ipc:///tmp/x": true, "inproc://x": true,
		"tcp://collector:5557": false, "tcp://10.0.0.1:5557": false,
	} {
		if EngineBinds(ep) != want {
			t.Errorf("EngineBinds(%q) = %v", ep, !want)
		}
	}
}
