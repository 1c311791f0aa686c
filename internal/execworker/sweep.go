package execworker

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// resultDirPrefix starts the name of a Handler's result directory, which
// goes on with the owning process's pid and a random part:
// backstop-results-<pid>-<random>.
const resultDirPrefix = "backstop-results-"

// resultDirPattern is this process's pattern for os.MkdirTemp.
func resultDirPattern() string { return fmt.Sprintf("%s%d-", resultDirPrefix, os.Getpid()) }

// resultDirPID is the pid in a result directory's name; false when the
// name is not one (another program's, or an older worker's without a pid).
func resultDirPID(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, resultDirPrefix)
	if !ok {
		return 0, false
	}
	pid, random, ok := strings.Cut(rest, "-")
	if !ok || random == "" || strings.Trim(random, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.Atoi(pid)
	if err != nil || n <= 0 || strconv.Itoa(n) != pid {
		return 0, false
	}
	return n, true
}

// processGone says whether no process has the pid: kill(pid, 0) fails
// with ESRCH. A live process (this user's or another's: EPERM), or any
// doubt, is not gone.
func processGone(pid int) bool {
	return pid != os.Getpid() && errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// SweepResultDirs removes from dir the result directories that workers
// killed before their Close left behind (SIGKILL, a crash): directories
// named as a Handler names its own, owned by this user, whose pid names no
// running process. Nothing else is touched: not another live worker's
// directory, not a directory without a pid in its name (an older
// worker's), not a file. New calls it on os.TempDir(); it returns how many
// it removed and the first error met (the sweep goes on past it).
func SweepResultDirs(dir string) (int, error) {
	es, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var first error
	removed := 0
	for _, e := range es {
		pid, ok := resultDirPID(e.Name())
		if !ok || !e.IsDir() || !processGone(pid) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		fi, err := os.Lstat(path)
		if err != nil || !fi.IsDir() {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Getuid() {
			continue
		}
		if err := os.RemoveAll(path); err != nil {
			first = cmp.Or(first, err)
			continue
		}
		removed++
	}
	return removed, first
}
