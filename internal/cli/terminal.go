package cli

import (
	"io"
	"os"

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
