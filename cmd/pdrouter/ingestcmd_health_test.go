package main

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/pdrouter/pdrouter/ingest"
	"github.com/pdrouter/pdrouter/internal/envflags"
)

// TestScrapeFailuresUnhealthyFlag: the health rule's failure count defaults
// to 2, is set by flag or PDR_SCRAPE_FAILURES_UNHEALTHY, reaches
// ingest.Config, and 0 is refused.
func TestScrapeFailuresUnhealthyFlag(t *testing.T) {
	if cfg, err := parseIngestFlags(nil); err != nil || cfg.ScrapeFailuresUnhealthy != ingest.DefaultScrapeFailuresUnhealthy || ingest.DefaultScrapeFailuresUnhealthy != 2 {
		t.Fatalf("default: %d, %v", cfg.ScrapeFailuresUnhealthy, err)
	}
	if cfg, err := parseIngestFlags(map[string]string{"PDR_SCRAPE_FAILURES_UNHEALTHY": "5"}); err != nil || cfg.ScrapeFailuresUnhealthy != 5 {
		t.Fatalf("from the environment: %d, %v", cfg.ScrapeFailuresUnhealthy, err)
	}
	if cfg, err := parseIngestFlags(nil, "--scrape-failures-unhealthy", "3"); err != nil || cfg.ScrapeFailuresUnhealthy != 3 {
		t.Fatalf("from the flag: %d, %v", cfg.ScrapeFailuresUnhealthy, err)
	}
	if _, err := parseIngestFlags(nil, "--scrape-failures-unhealthy", "0"); err == nil || !strings.Contains(err.Error(), "--scrape-failures-unhealthy") {
		t.Fatalf("0: %v", err)
	}
}

// parseIngestFlags binds ingest's flags to a fresh flag set, sets them from
// args, then from env (nil: no environment), and builds its configuration.
func parseIngestFlags(env map[string]string, args ...string) (ingest.Config, error) {
	var f ingestFlags
	fs := pflag.NewFlagSet("ingest", pflag.ContinueOnError)
	f.bindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return ingest.Config{}, err
	}
	if err := envflags.Apply(fs, func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		return ingest.Config{}, err
	}
	return f.config(&app{})
}
