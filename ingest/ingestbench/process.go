package ingestbench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"time"
)

// publisher is the parent's handle on the engine publisher of one run.
type publisher interface {
	endpoint() string
	// sending returns once ingest subscribed and the publisher began to
	// send.
	sending() error
	// stop ends the publisher and returns its CPU; apart is false when it
	// ran in this process (its CPU is then in the ingest process's).
	stop() (cpu time.Duration, apart bool, err error)
	// kill ends it at once (error paths); harmless after stop.
	kill()
}

// startPublisher starts the publisher of w: cfg.PublisherCommand's
// process, or without one a goroutine of this process.
func startPublisher(ctx context.Context, cfg Config, w Workload) (publisher, error) {
	if cfg.PublisherCommand == nil {
		return startInProcess(ctx, w)
	}
	return startProcess(cfg.PublisherCommand(w), cfg.Log)
}

// procPublisher is a publisher child speaking the protocol of publisher.go.
type procPublisher struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
	addr  string
	done  bool
}

func startProcess(cmd *exec.Cmd, log *slog.Logger) (*procPublisher, error) {
	if cmd.Stderr == nil {
		cmd.Stderr = &logWriter{log: log}
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("publisher process: %w", err)
	}
	p := &procPublisher{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
	line, err := p.expect("addr ")
	if err != nil {
		p.kill()
		return nil, err
	}
	p.addr = strings.TrimPrefix(line, "addr ")
	log.Info("bench ingest: publisher process started", "pid", cmd.Process.Pid, "endpoint", p.addr)
	return p, nil
}

func (p *procPublisher) endpoint() string { return p.addr }

func (p *procPublisher) sending() error {
	_, err := p.expect("start")
	return err
}

// expect reads the child's stdout until a line starts with prefix.
func (p *procPublisher) expect(prefix string) (string, error) {
	for p.out.Scan() {
		if l := p.out.Text(); strings.HasPrefix(l, prefix) {
			return l, nil
		}
	}
	return "", fmt.Errorf("publisher process %v exited before saying %q (%v)", p.cmd.Args, prefix, p.out.Err())
}

func (p *procPublisher) stop() (time.Duration, bool, error) {
	_ = p.stdin.Close()
	err := p.cmd.Wait()
	p.done = true
	if err != nil {
		return 0, true, fmt.Errorf("publisher process: %w", err)
	}
	return p.cmd.ProcessState.UserTime() + p.cmd.ProcessState.SystemTime(), true, nil
}

func (p *procPublisher) kill() {
	if p.done {
		return
	}
	p.done = true
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
}

// inProcPublisher runs the same publisher in a goroutine of this process
// (no process to start; its CPU is counted as ingest's).
type inProcPublisher struct {
	p       *pub
	started chan struct{}
	errc    chan error
	cancel  context.CancelFunc
}

func startInProcess(ctx context.Context, w Workload) (*inProcPublisher, error) {
	p, err := listen("")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	ip := &inProcPublisher{p: p, started: make(chan struct{}), errc: make(chan error, 1), cancel: cancel}
	payloads := Payloads(w.EventsPerMessage)
	go func() { ip.errc <- p.send(ctx, payloads, w.Messages, func() { close(ip.started) }) }()
	return ip, nil
}

func (ip *inProcPublisher) endpoint() string { return ip.p.endpoint() }

func (ip *inProcPublisher) sending() error {
	select {
	case <-ip.started:
		return nil
	case err := <-ip.errc:
		ip.errc <- err
		// A short run can start and finish before this select; both
		// channels are then ready and select picks either.
		select {
		case <-ip.started:
			return nil
		default:
		}
		return errors.Join(errors.New("in-process publisher stopped before sending"), err)
	}
}

func (ip *inProcPublisher) stop() (time.Duration, bool, error) {
	err := <-ip.errc
	ip.errc <- err
	ip.kill()
	return 0, false, err
}

func (ip *inProcPublisher) kill() {
	ip.cancel()
	ip.p.close()
}

// logWriter turns the publisher's stderr into log lines.
type logWriter struct{ log *slog.Logger }

func (w *logWriter) Write(b []byte) (int, error) {
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		w.log.Warn("bench ingest: publisher", "stderr", l)
	}
	return len(b), nil
}
