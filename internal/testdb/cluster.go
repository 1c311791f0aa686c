package testdb

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"
)

// Cluster is a PostgreSQL server of one test's own, initialised in a
// temporary directory and stopped and deleted when the test ends: for
// tests that restart the server (a restart of the shared server of
// scripts/with-postgres would break every other test using it). It runs
// where the Postgres tests run (BACKSTOP_TEST_POSTGRES_URL set), with the
// same server binaries scripts/with-postgres finds.
type Cluster struct {
	URL  string
	t    testing.TB
	ctl  []string // the pg_ctl command, as the server's user
	data string
	log  string
}

// OwnPostgres starts a cluster for the test (skipped, or failed with
// BACKSTOP_TEST_REQUIRE_POSTGRES=1, where Postgres tests are).
func OwnPostgres(t testing.TB) *Cluster {
	t.Helper()
	if os.Getenv(EnvPostgresURL) == "" {
		if os.Getenv(EnvRequirePostgres) == "1" {
			t.Fatalf("testdb: %s=1 but %s is not set (run the tests under scripts/with-postgres)", EnvRequirePostgres, EnvPostgresURL)
		}
		t.Skipf("testdb: %s is not set; skipping PostgreSQL test (run under scripts/with-postgres)", EnvPostgresURL)
	}
	bindir, err := pgBindir()
	if err != nil {
		t.Fatal(err)
	}
	// initdb and postgres refuse to run as root: as root, run them as
	// "postgres", in a directory under /tmp it owns.
	var as []string
	dir, err := os.MkdirTemp("/tmp", "backstop-pg-own-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if os.Getuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("testdb: running as root but there is no 'postgres' user to run the server as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		as = []string{"runuser", "-u", "postgres", "--"}
	}
	c := &Cluster{t: t, data: filepath.Join(dir, "data"), log: filepath.Join(dir, "postgres.log")}
	c.ctl = append(append(as, filepath.Join(bindir, "pg_ctl")), "-D", c.data, "-l", c.log, "-w", "-t", "60")
	initdb := append(append([]string{}, as...), filepath.Join(bindir, "initdb"), "-D", c.data, "-U", "postgres", "--auth=trust",
		"--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions")
	if out, err := exec.Command(initdb[0], initdb[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("testdb: initdb: %v\n%s", err, out)
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -c unix_socket_directories=%s -c fsync=off -c synchronous_commit=off "+
		"-c full_page_writes=off -c max_connections=50 -c shared_buffers=32MB", port, dir)
	if err := c.run("start", "-o", opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.run("stop", "-m", "immediate") })
	c.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	return c
}

// Restart restarts the server (pg_ctl restart -m fast: every session is
// terminated, "terminating connection due to administrator command") and
// returns once it accepts connections again.
func (c *Cluster) Restart() {
	c.t.Helper()
	if err := c.run("restart", "-m", "fast"); err != nil {
		c.t.Fatal(err)
	}
}

func (c *Cluster) run(args ...string) error {
	cmd := append(append([]string{}, c.ctl...), args...)
	out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput()
	if err != nil {
		log, _ := os.ReadFile(c.log)
		return fmt.Errorf("testdb: pg_ctl %s: %v\n%s\nserver log:\n%s", args[0], err, out, log)
	}
	return nil
}

// pgBindir finds initdb and pg_ctl as scripts/with-postgres does: on PATH,
// else the highest /usr/lib/postgresql/N/bin.
func pgBindir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if _, err := exec.LookPath("pg_ctl"); err == nil {
			return filepath.Dir(p), nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi < vj
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "pg_ctl")); err == nil {
			return dirs[i], nil
		}
	}
	return "", fmt.Errorf("testdb: no PostgreSQL server binaries found (initdb, pg_ctl)")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Retry calls op until it succeeds, for up to 30 s: a producer's writes
// through a Postgres restart, where each pool connection from before the
// restart fails once (the follower, not the producer, is under test).
func Retry(t testing.TB, op func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := op()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
