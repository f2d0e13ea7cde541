package deployments

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	Cmd, Args string
	Stage     int // index of the FROM it belongs to
}

func parseDockerfile(t *testing.T) []instruction {
	t.Helper()
	return parseDockerfileAt(t, "Dockerfile")
}

// parseDockerfileAt parses deployments/docker/<name>.
func parseDockerfileAt(t *testing.T, name string) []instruction {
	t.Helper()
	var out []instruction
	stage := -1
	var cur strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(readFile(t, path("docker", name))))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if strings.HasPrefix(line, "#") {
			continue // comment inside a continued instruction
		}
		if strings.HasSuffix(line, "\\") {
			cur.WriteString(strings.TrimSuffix(line, "\\") + " ")
			continue
		}
		cur.WriteString(line)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		cur.Reset()
		cmd = strings.ToUpper(cmd)
		if cmd == "FROM" {
			stage++
		}
		out = append(out, instruction{Cmd: cmd, Args: strings.Join(strings.Fields(args), " "), Stage: stage})
	}
	if stage < 1 {
		t.Fatalf("%s: want a multi-stage build, found %d stage(s)", name, stage+1)
	}
	return out
}

var envPairRe = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)=("[^"]*"|\S*)`)

// dockerfileEnv is the ENV of the final stage: what every container of the
// image starts with.
func dockerfileEnv(t *testing.T) map[string]string {
	t.Helper()
	ins := parseDockerfile(t)
	last := ins[len(ins)-1].Stage
	env := map[string]string{}
	for _, in := range ins {
		if in.Cmd == "ENV" && in.Stage == last {
			for _, m := range envPairRe.FindAllStringSubmatch(in.Args, -1) {
				env[m[1]] = strings.Trim(m[2], `"`)
			}
		}
	}
	return env
}

func TestDockerfile(t *testing.T) {
	ins := parseDockerfile(t)
	last := ins[len(ins)-1].Stage
	var (
		froms                           []string
		user, expose, entrypoint, build string
		cacheMount, cgoOff              bool
		copied                          = map[string]bool{}
		goVersion                       string
	)
	for _, in := range ins {
		switch in.Cmd {
		case "ARG":
			if v, ok := strings.CutPrefix(in.Args, "GO_VERSION="); ok {
				goVersion = v
			}
		case "FROM":
			froms = append(froms, in.Args)
		case "ENV":
			if in.Stage < last && strings.Contains(in.Args, "CGO_ENABLED=0") {
				cgoOff = true
			}
		case "RUN":
			if strings.Contains(in.Args, "--mount=type=cache,target=/go/pkg/mod") {
				cacheMount = true
			}
			if strings.Contains(in.Args, "go build") {
				build = in.Args
			}
		case "COPY":
			if in.Stage == last {
				f := strings.Fields(in.Args)
				copied[f[len(f)-1]] = true
			}
		case "USER":
			if in.Stage == last {
				user = in.Args
			}
		case "EXPOSE":
			expose = in.Args
		case "ENTRYPOINT":
			entrypoint = in.Args
		}
	}
	if !strings.Contains(froms[0], "golang:${GO_VERSION}") || !strings.Contains(froms[0], " AS build") {
		t.Errorf("first stage %q: want the golang:${GO_VERSION} builder", froms[0])
	}
	// The builder's Go must satisfy go.mod's go directive (major.minor).
	gomod := string(readFile(t, filepath.Join(repoRoot, "go.mod")))
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(gomod)
	if m == nil || goVersion != m[1] {
		t.Errorf("ARG GO_VERSION=%s, go.mod says go %v", goVersion, m)
	}
	final := froms[len(froms)-1]
	if !strings.HasPrefix(final, "gcr.io/distroless/static") || !strings.HasSuffix(final, ":nonroot") {
		t.Errorf("final stage %q: want distroless/static:nonroot (no shell, no libc: the binary is static)", final)
	}
	if !cacheMount || !cgoOff || !strings.Contains(build, "./cmd/pdrouter") || !strings.Contains(build, "-o /out/pdrouter") {
		t.Errorf("builder: want CGO_ENABLED=0, a module cache mount, and go build -o /out/pdrouter ./cmd/pdrouter; got %q", build)
	}
	if user != "65532:65532" && user != "65532" {
		t.Errorf("USER %q: want 65532", user)
	}
	env := dockerfileEnv(t)
	if addr := env["PDR_HTTP_ADDR"]; expose != "8080" || portOf(t, addr) != 8080 {
		t.Errorf("EXPOSE %s with PDR_HTTP_ADDR %q: want 8080 on both", expose, addr)
	}
	var ep []string
	if err := json.Unmarshal([]byte(entrypoint), &ep); err != nil || len(ep) != 1 || !copied[ep[0]] || filepath.Base(ep[0]) != "pdrouter" {
		t.Errorf("ENTRYPOINT %s: want the exec form naming the copied pdrouter binary", entrypoint)
	}
	if !copied[env["PDR_DATA_DIR"]] {
		t.Errorf("PDR_DATA_DIR %q is not created (owned by 65532) in the image: a volume there would be root-owned", env["PDR_DATA_DIR"])
	}
	for _, c := range []string{"serve", "ingest", "migrate", "dev"} {
		checkEnv(t, "Dockerfile ENV", c, env)
	}
}

// The image's binary is built with CGO_ENABLED=0: it must be static, or it
// would not start on distroless/static.
func TestBinaryIsStatic(t *testing.T) {
	f, err := elf.Open(pdrouterBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("the binary asks for a dynamic loader: it is not static")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary links %v dynamically", libs)
	}
}

// The build context ignore rules keep out nothing the build reads.
func TestDockerignoreKeepsBuildInputs(t *testing.T) {
	var patterns []string
	sc := bufio.NewScanner(bytes.NewReader(readFile(t, path("docker", "Dockerfile.dockerignore"))))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
			patterns = append(patterns, l)
		}
	}
	ignored := func(rel string) string {
		for _, p := range patterns {
			if strings.HasPrefix(p, "**/") {
				if ok, _ := filepath.Match(p[3:], filepath.Base(rel)); ok {
					return p
				}
				continue
			}
			if rel == p || strings.HasPrefix(rel, p+"/") {
				return p
			}
		}
		return ""
	}
	cmd := exec.Command("go", "list", "-deps", "-f", `{{if .Module}}{{if .Module.Main}}{{.Dir}}{{range .GoFiles}} {{.}}{{end}}{{range .EmbedFiles}} {{.}}{{end}}{{end}}{{end}}`, "./cmd/pdrouter")
	cmd.Dir = repoRoot
	cmd.Env = append(cleanEnv(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	inputs := []string{"go.mod", "go.sum"}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		dir, _ := filepath.Rel(repoRoot, f[0])
		for _, name := range f[1:] {
			inputs = append(inputs, filepath.ToSlash(filepath.Join(dir, name)))
		}
	}
	if len(inputs) < 20 {
		t.Fatalf("go list found only %d build inputs", len(inputs))
	}
	for _, in := range inputs {
		if p := ignored(in); p != "" {
			t.Errorf("Dockerfile.dockerignore pattern %q drops %s, which the build needs", p, in)
		}
	}
	for _, must := range []string{".git", ".cache", "data"} {
		if !slices.Contains(patterns, must) {
			t.Errorf("Dockerfile.dockerignore should keep %s out of the build context", must)
		}
	}
}
