package envflags

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestPrecedenceFlagOverEnvOverDefault(t *testing.T) {
	env := map[string]string{"PDR_TOPIC_PREFIX": "env-", "PDR_HTTP_ADDR": "127.0.0.1:9"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	prefix := fs.String("topic-prefix", "", "")
	addr := fs.String("http-addr", "127.0.0.1:8080", "")
	dir := fs.String("data-dir", "data", "")
	if err := fs.Parse([]string{"--http-addr", "127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	if err := Apply(fs, lookup); err != nil {
		t.Fatal(err)
	}
	if *prefix != "env-" || *addr != "127.0.0.1:1" || *dir != "data" {
		t.Fatalf("got prefix=%q addr=%q dir=%q", *prefix, *addr, *dir)
	}
}

func TestBadEnvValueNamesVariableAndFlag(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.Int("router-queue-threshold", 0, "")
	err := Apply(fs, func(k string) (string, bool) { return "lots", k == "PDR_ROUTER_QUEUE_THRESHOLD" })
	if err == nil || !strings.Contains(err.Error(), "PDR_ROUTER_QUEUE_THRESHOLD") || !strings.Contains(err.Error(), "--router-queue-threshold") {
		t.Fatalf("error %v does not name the variable and the flag", err)
	}
}

func TestAnnotateIsIdempotent(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.String("brokers", "", "seed brokers")
	Annotate(fs)
	Annotate(fs)
	if u := fs.Lookup("brokers").Usage; u != "seed brokers [env PDR_BROKERS]" {
		t.Fatalf("usage = %q", u)
	}
}
