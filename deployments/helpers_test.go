package deployments

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/decider"
)

var (
	// repoRoot is the module root (the parent of deployments/).
	repoRoot string
	// tmpRoot holds what the tests build once per process.
	tmpRoot string

	binOnce sync.Once
	binPath string
	binErr  error

	helpMu    sync.Mutex
	helpCache = map[string]*cmdHelp{}
)

func TestMain(m *testing.M) {
	wd, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	repoRoot = filepath.Dir(wd)
	tmpRoot, err = os.MkdirTemp("", "pdrouter-deployments-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(tmpRoot)
	os.Exit(code)
}

// path returns a path under deployments/.
func path(elem ...string) string {
	return filepath.Join(append([]string{repoRoot, "deployments"}, elem...)...)
}

// pdrouterBinary builds cmd/pdrouter once, the way the Dockerfile does
// (CGO_ENABLED=0, -trimpath), and returns its path. A test in this package
// cannot import package main, so the flags and /metrics are read from the
// real binary.
func pdrouterBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binPath = filepath.Join(tmpRoot, "pdrouter")
		cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-o", binPath, "./cmd/pdrouter")
		cmd.Dir = repoRoot
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build ./cmd/pdrouter with CGO_ENABLED=0: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// flagInfo is one flag of `pdrouter <command> --help`.
type flagInfo struct {
	Name, Type, Default, Env string
}

// cmdHelp is what `pdrouter <command> --help` documents.
type cmdHelp struct {
	Command string
	Flags   map[string]flagInfo // by flag name, without "--"
	Envs    map[string]flagInfo // by PDR_* variable
}

var (
	helpFlagRe = regexp.MustCompile(`^\s+(?:-\w, )?--([a-z0-9][a-z0-9-]*)(?: (\S+))?\s{2,}(.*)$`)
	helpEnvRe  = regexp.MustCompile(`\[env (PDR_[A-Z0-9_]+)\]`)
	helpDefRe  = regexp.MustCompile(`\(default (.*)\)\s*$`)
)

// help runs `pdrouter <command> --help` and parses its flags.
func help(t *testing.T, command string) *cmdHelp {
	t.Helper()
	helpMu.Lock()
	defer helpMu.Unlock()
	if h := helpCache[command]; h != nil {
		return h
	}
	args := append(strings.Fields(command), "--help")
	cmd := exec.Command(pdrouterBinary(t), args...)
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pdrouter %s --help: %v\n%s", command, err, out)
	}
	h := &cmdHelp{Command: command, Flags: map[string]flagInfo{}, Envs: map[string]flagInfo{}}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		m := helpFlagRe.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		fi := flagInfo{Name: m[1], Type: m[2]}
		if d := helpDefRe.FindStringSubmatch(m[3]); d != nil {
			fi.Default = strings.Trim(d[1], `"`)
		}
		if e := helpEnvRe.FindStringSubmatch(m[3]); e != nil {
			fi.Env = e[1]
			h.Envs[fi.Env] = fi
		}
		h.Flags[fi.Name] = fi
	}
	if len(h.Flags) < 5 {
		t.Fatalf("pdrouter %s --help: found only %d flags in\n%s", command, len(h.Flags), out)
	}
	helpCache[command] = h
	return h
}

// cleanEnv is the environment without PDR_* variables, so a developer's
// shell does not change what the binary reports.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PDR_") {
			env = append(env, kv)
		}
	}
	return append(env, "GIN_MODE=release")
}

// checkValue checks that v parses as the flag's type.
func checkValue(fi flagInfo, v string) error {
	typ := fi.Type
	if typ != "" && typ != "int" && typ != "duration" && typ != "float" && typ != "string" && typ != "strings" && typ != "stringArray" {
		// pflag shows a back-quoted word of the usage as the type; infer it
		// from the default instead.
		if _, err := time.ParseDuration(fi.Default); err == nil {
			typ = "duration"
		} else {
			typ = "string"
		}
	}
	var err error
	switch typ {
	case "":
		_, err = strconv.ParseBool(v)
	case "int":
		_, err = strconv.ParseInt(v, 10, 64)
	case "float":
		_, err = strconv.ParseFloat(v, 64)
	case "duration":
		_, err = time.ParseDuration(v)
	}
	if err != nil {
		return fmt.Errorf("--%s wants a %s: %w", fi.Name, map[string]string{"": "bool"}[typ]+typ, err)
	}
	if fi.Name == decider.FlagConditionalDisaggCfg && v != "" {
		if _, err := decider.ParseDisaggConfig([]byte(v)); err != nil {
			return fmt.Errorf("--%s: %w", fi.Name, err)
		}
	}
	return nil
}

// checkEnv checks every PDR_* variable of env against `pdrouter <command>
// --help`: the variable must belong to a flag of that command, and its value
// must parse as the flag's type.
func checkEnv(t *testing.T, where, command string, env map[string]string) {
	t.Helper()
	h := help(t, command)
	for k, v := range env {
		if !strings.HasPrefix(k, "PDR_") {
			continue
		}
		fi, ok := h.Envs[k]
		if !ok {
			t.Errorf("%s: %s is not an environment variable of `pdrouter %s` (see its --help)", where, k, command)
			continue
		}
		if err := checkValue(fi, v); err != nil {
			t.Errorf("%s: %s=%q: %v", where, k, v, err)
		}
	}
}

// checkArgs checks a container's arguments: the first names the command,
// every --flag exists for it and its value parses; no positional argument.
func checkArgs(t *testing.T, where string, args []string) (command string, flags map[string]string) {
	t.Helper()
	if len(args) == 0 {
		t.Errorf("%s: no arguments: the command (serve, ingest, migrate) must be explicit", where)
		return "", nil
	}
	command = args[0]
	switch command {
	case "serve", "ingest", "migrate", "dev":
	default:
		t.Errorf("%s: unexpected command %q", where, command)
		return command, nil
	}
	h := help(t, command)
	flags = map[string]string{}
	for i := 1; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "--") {
			t.Errorf("%s: positional argument %q: `pdrouter %s` takes none", where, a, command)
			continue
		}
		name, val, hasVal := strings.Cut(a[2:], "=")
		fi, ok := h.Flags[name]
		if !ok {
			t.Errorf("%s: --%s is not a flag of `pdrouter %s`", where, name, command)
			continue
		}
		if !hasVal && fi.Type != "" {
			if i+1 >= len(args) {
				t.Errorf("%s: --%s needs a value", where, name)
				continue
			}
			i++
			val = args[i]
		} else if !hasVal {
			val = "true"
		}
		if err := checkValue(fi, val); err != nil {
			t.Errorf("%s: %v", where, err)
		}
		flags[name] = val
	}
	return command, flags
}

// effective returns the value a flag takes from the flags, then the
// environment, then its default.
func effective(t *testing.T, command, flag string, flags, env map[string]string) string {
	t.Helper()
	if v, ok := flags[flag]; ok {
		return v
	}
	fi := help(t, command).Flags[flag]
	if v, ok := env[fi.Env]; ok {
		return v
	}
	return fi.Default
}

func mustDuration(t *testing.T, what, v string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s: %q is not a duration", what, v)
	}
	return d
}

// portOf returns the port of a host:port listen address.
func portOf(t *testing.T, addr string) int {
	t.Helper()
	i := strings.LastIndex(addr, ":")
	p, err := strconv.Atoi(addr[i+1:])
	if i < 0 || err != nil {
		t.Fatalf("%q is not host:port", addr)
	}
	return p
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
