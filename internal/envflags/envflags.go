// Package envflags gives every command-line flag an environment variable:
// --topic-prefix is PDR_TOPIC_PREFIX, --router-queue-threshold is
// PDR_ROUTER_QUEUE_THRESHOLD. Precedence: a flag given on the command line
// wins over the environment, which wins over the default.
package envflags

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"
)

// Prefix of every pdrouter environment variable.
const Prefix = "PDR_"

// Name returns the environment variable of a flag.
func Name(flag string) string {
	return Prefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// Apply sets each flag of fs that was not given on the command line from its
// environment variable, read through lookup (os.LookupEnv in production).
// A value the flag rejects is an error that names both the variable and the
// flag.
func Apply(fs *pflag.FlagSet, lookup func(string) (string, bool)) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed {
			return
		}
		env := Name(f.Name)
		v, ok := lookup(env)
		if !ok {
			return
		}
		if e := fs.Set(f.Name, v); e != nil {
			err = fmt.Errorf("environment variable %s=%q (for --%s): %w", env, v, f.Name, e)
		}
	})
	return err
}

// Annotate appends "[env PDR_X]" to every flag's usage, so --help documents
// the variables.
func Annotate(fs *pflag.FlagSet) {
	fs.VisitAll(func(f *pflag.Flag) {
		suffix := " [env " + Name(f.Name) + "]"
		if !strings.HasSuffix(f.Usage, suffix) {
			f.Usage += suffix
		}
	})
}
