package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// The confirmation tests (purge, redrive, discard and resolve by filter)
// run the binary with a chosen stdin: a pseudo-terminal (a person may be
// asked), a pipe (a script: never asked) or nil (/dev/null).

// openPTY opens a pseudo-terminal: what the user types is written to
// master, and the program reads it from slave (its stdin).
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	go io.Copy(io.Discard, m) // the terminal's echo
	return m, s
}

// runStdin runs the binary with args and stdin and returns its stdout,
// stderr and exit code.
func runStdin(t *testing.T, stdin io.Reader, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	var out, errb bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// typeAnswer types an answer to the question the next run asks on the
// terminal master.
func typeAnswer(t *testing.T, master *os.File, answer string) {
	t.Helper()
	if _, err := master.WriteString(answer + "\n"); err != nil {
		t.Fatal(err)
	}
}
