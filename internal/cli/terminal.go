package cli

import (
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// isTerminal says whether r is a terminal (a person may be typing), as
// opposed to a pipe, a file or /dev/null (a script).
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// confirmMany asks before a bulk action on more than over dead letters
// (--confirm-over): the question on a terminal (no: exit 1, nothing done),
// exit 2 naming --yes without one. cmd names the command ("dlq redrive"),
// verb its action ("redrive"), done what did not happen ("replayed").
func (a *app) confirmMany(cmd, verb, done string, n, over int) error {
	return a.confirmManyOf(cmd, verb, done, "dead letters", n, over)
}

// confirmManyOf is confirmMany's rule for any bulk action: what names
// what it acts on ("tasks").
func (a *app) confirmManyOf(cmd, verb, done, what string, n, over int) error {
	if n <= over {
		return nil
	}
	if !isTerminal(a.stdin) {
		return usageErr("%s: %d %s match, more than --confirm-over %d, and there is no terminal to ask on: "+
			"pass --yes to %s them (or --dry-run to see them first)", cmd, n, what, over, verb)
	}
	if !a.confirm(fmt.Sprintf("%s%s %d %s?", strings.ToUpper(verb[:1]), verb[1:], n, what)) {
		return &exitError{code: ExitFailure, err: fmt.Errorf("%s: not confirmed; nothing %s", cmd, done)}
	}
	return nil
}
