package logflags

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestLevelsAndFormats(t *testing.T) {
	var b bytes.Buffer
	l, err := New(&b, "warn", "json")
	if err != nil {
		t.Fatal(err)
	}
	l.Info("dropped")
	l.Warn("kept", "k", 1)
	var rec map[string]any
	if err := json.Unmarshal(b.Bytes(), &rec); err != nil || rec["msg"] != "kept" {
		t.Fatalf("want one JSON record of the warning, got %q (%v)", b.String(), err)
	}
	b.Reset()
	if l, err = New(&b, "debug", "TEXT"); err != nil {
		t.Fatal(err)
	}
	l.Debug("d")
	if !strings.Contains(b.String(), "msg=d") {
		t.Fatalf("text debug record missing: %q", b.String())
	}
	for _, bad := range [][2]string{{"loud", "text"}, {"info", "xml"}} {
		if _, err := New(&b, bad[0], bad[1]); err == nil {
			t.Errorf("New(%q, %q) accepted", bad[0], bad[1])
		}
	}
}

func TestAtLeast(t *testing.T) {
	var b bytes.Buffer
	base, err := New(&b, "info", "text")
	if err != nil {
		t.Fatal(err)
	}
	quiet, err := AtLeast(base.With("component", "kafka"), "--kafka-log-level", "warn")
	if err != nil {
		t.Fatal(err)
	}
	quiet.Info("dropped")
	quiet.Warn("kept")
	if strings.Contains(b.String(), "dropped") || !strings.Contains(b.String(), "msg=kept component=kafka") {
		t.Fatalf("warn filter over info: %q", b.String())
	}
	b.Reset()
	loud, _ := AtLeast(base, "--kafka-log-level", "debug")
	loud.Debug("below the base level")
	if b.Len() != 0 {
		t.Fatalf("logged below the base logger's level: %q", b.String())
	}
	if _, err := AtLeast(base, "--kafka-log-level", "chatty"); err == nil || !strings.Contains(err.Error(), `--kafka-log-level "chatty"`) {
		t.Fatalf("bad level: %v", err)
	}
}
