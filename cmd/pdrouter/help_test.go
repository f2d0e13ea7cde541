package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/pdrouter/pdrouter/internal/envflags"
)

// TestHelpNamesEachVariableOnce: `pdrouter <cmd> --help` names the
// environment variable of each of its flags exactly once, whichever
// package registered the flag.
func TestHelpNamesEachVariableOnce(t *testing.T) {
	root := newRootCmd(&app{})
	for _, c := range root.Commands() {
		out, _, err := run(t, nil, c.Name(), "--help")
		if err != nil {
			t.Fatalf("%s --help: %v", c.Name(), err)
		}
		if !strings.Contains(out, "Usage:") {
			t.Fatalf("%s --help printed no usage:\n%s", c.Name(), out)
		}
		check := func(f *pflag.Flag) {
			if f.Hidden || f.Name == "help" {
				return
			}
			named := regexp.MustCompile(`env ` + envflags.Name(f.Name) + `\b`)
			if n := len(named.FindAllString(out, -1)); n != 1 {
				t.Errorf("%s --help names %s %d times, want once", c.Name(), envflags.Name(f.Name), n)
			}
		}
		c.LocalFlags().VisitAll(check)
		c.InheritedFlags().VisitAll(check)
	}
}
