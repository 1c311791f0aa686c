// Command testprogress turns `go test -json` into per-package progress for
// scripts/test: a line when a package starts, one when it passes, fails or
// has no tests (with its time), a note every minute naming the packages
// still running, and, for a package that failed or did not build, its whole
// output. Lines that are not test events (go vet, build errors) pass
// through. It exits 1 if any package failed.
//
//	go test -json ./... | go run ./tools/testprogress
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// event is one line of `go test -json` (go doc test2json).
type event struct {
	Action      string
	Package     string
	ImportPath  string // build-output and build-fail
	Test        string
	Elapsed     float64
	Output      string
	FailedBuild string
}

// progress prints what the stream says, as it says it.
type progress struct {
	mu      sync.Mutex
	out     io.Writer
	now     func() time.Time
	started map[string]time.Time
	output  map[string]*strings.Builder // per package (or import path), until it ends
	failed  []string
	passed  int
}

func newProgress(out io.Writer, now func() time.Time) *progress {
	return &progress{out: out, now: now, started: map[string]time.Time{}, output: map[string]*strings.Builder{}}
}

func (p *progress) buf(key string) *strings.Builder {
	b := p.output[key]
	if b == nil {
		b = &strings.Builder{}
		p.output[key] = b
	}
	return b
}

// line handles one line of the stream.
func (p *progress) line(l []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var e event
	if len(l) == 0 || l[0] != '{' || json.Unmarshal(l, &e) != nil || (e.Action == "" && e.Package == "") {
		fmt.Fprintf(p.out, "%s\n", l)
		return
	}
	switch e.Action {
	case "build-output":
		p.buf(e.ImportPath).WriteString(e.Output)
	case "build-fail":
		// The package's own fail event (FailedBuild) counts it.
		fmt.Fprintf(p.out, "build failed: %s\n%s", e.ImportPath, p.buf(e.ImportPath).String())
		delete(p.output, e.ImportPath)
	case "start":
		p.started[e.Package] = p.now()
		fmt.Fprintf(p.out, "start %s\n", e.Package)
	case "output":
		p.buf(e.Package).WriteString(e.Output)
	case "pass", "fail", "skip":
		if e.Test != "" {
			return
		}
		out := p.buf(e.Package).String()
		delete(p.output, e.Package)
		delete(p.started, e.Package)
		switch {
		case e.Action == "fail":
			p.failed = append(p.failed, e.Package)
			why := ""
			if e.FailedBuild != "" {
				why = " [build failed: " + e.FailedBuild + "]"
			}
			fmt.Fprintf(p.out, "FAIL  %s %.1fs%s\n%s", e.Package, e.Elapsed, why, out)
		case e.Action == "skip" || strings.Contains(out, "[no test files]"):
			// nothing to report
		default:
			p.passed++
			fmt.Fprintf(p.out, "ok    %s %.1fs\n", e.Package, e.Elapsed)
		}
	}
}

// running names the packages still running, longest first.
func (p *progress) running() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	pkgs := make([]string, 0, len(p.started))
	for pkg := range p.started {
		pkgs = append(pkgs, pkg)
	}
	slices.SortFunc(pkgs, func(a, b string) int { return p.started[a].Compare(p.started[b]) })
	parts := make([]string, len(pkgs))
	for i, pkg := range pkgs {
		parts[i] = fmt.Sprintf("%s (%s)", pkg, p.now().Sub(p.started[pkg]).Round(time.Second))
	}
	return strings.Join(parts, ", ")
}

// summary is the last line; ok says whether everything passed.
func (p *progress) summary() (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.failed) > 0 {
		return fmt.Sprintf("%d packages passed, %d failed: %s", p.passed, len(p.failed), strings.Join(p.failed, " ")), false
	}
	return fmt.Sprintf("%d packages passed", p.passed), true
}

func run(in io.Reader, out io.Writer, every time.Duration) bool {
	p := newProgress(out, time.Now)
	done := make(chan struct{})
	defer close(done)
	go func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if r := p.running(); r != "" {
					p.mu.Lock()
					fmt.Fprintf(p.out, "..... still running: %s\n", r)
					p.mu.Unlock()
				}
			}
		}
	}()
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		p.line(sc.Bytes())
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(out, "testprogress:", err)
		return false
	}
	s, ok := p.summary()
	fmt.Fprintln(out, s)
	return ok
}

func main() {
	if !run(os.Stdin, os.Stdout, time.Minute) {
		os.Exit(1)
	}
}
