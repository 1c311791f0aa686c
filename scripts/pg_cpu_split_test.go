package scripts

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// pg-cpu-split refuses bad arguments and a server it cannot reach: exit 2
// and a message, and it runs no command.
func TestPgCPUSplitRefusesBadArguments(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3 on PATH")
	}
	marker := t.TempDir() + "/ran"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--url", "postgres://127.0.0.1:1/db", "--"}, "no command"},
		{[]string{"--url", "postgres://127.0.0.1:1/", "--", "touch", marker}, "names no database"},
		{[]string{"--url", "postgres://127.0.0.1:1/db?connect_timeout=2", "--", "touch", marker}, "cannot reach the server"},
		{[]string{"--", "touch", marker}, "--url"},
	} {
		out, err := exec.Command("./pg-cpu-split", c.args...).CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Errorf("%v: err %v, want exit 2; output %s", c.args, err, out)
			continue
		}
		if !strings.Contains(string(out), c.want) {
			t.Errorf("%v: output %q, want %q", c.args, out, c.want)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("a refused run ran its command")
	}
}

// The window's CPU lands where it was spent: a statement that burns CPU on
// the named database counts as its backends', the same statement on
// another database as the server's other processes', and time outside the
// window (before --from's line, after --to's) not at all.
func TestPgCPUSplitCountsTheWindowByDatabase(t *testing.T) {
	base := os.Getenv("BACKSTOP_TEST_POSTGRES_URL")
	if base == "" {
		t.Skip("BACKSTOP_TEST_POSTGRES_URL not set")
	}
	for _, tool := range []string{"psql", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s on PATH", tool)
		}
	}
	name := fmt.Sprintf("cpusplit_%d", time.Now().UnixNano())
	psql := func(u string, sql string) {
		t.Helper()
		if out, err := exec.Command("psql", u, "-qXc", sql).CombinedOutput(); err != nil {
			t.Fatalf("psql %s: %v: %s", sql, err, out)
		}
	}
	other := name + "_other"
	for _, db := range []string{name, other} {
		psql(base, "CREATE DATABASE "+db)
		t.Cleanup(func() { psql(base, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)") })
	}
	dbURL := func(db string) string {
		u, err := url.Parse(base)
		if err != nil {
			t.Fatal(err)
		}
		u.Path = "/" + db
		return u.String()
	}
	burn := "SELECT sum(i) FROM generate_series(1, 10000000) i" // about half a second of one backend's CPU
	script := fmt.Sprintf(`psql %q -qXAtc %q >/dev/null   # before the window: not counted
psql %q -qXAtc %q >/dev/null
echo start
psql %q -qXAtc %q >/dev/null
psql %q -qXAtc %q >/dev/null
echo stop
psql %q -qXAtc %q >/dev/null   # after the window: not counted
psql %q -qXAtc %q >/dev/null`,
		dbURL(name), burn, dbURL(name), burn, dbURL(name), burn, dbURL(other), burn, dbURL(name), burn, dbURL(name), burn)
	out, err := exec.Command("./pg-cpu-split", "--url", dbURL(name), "--from", "^start", "--to", "^stop", "--tag", "t",
		"--", "bash", "-c", script).CombinedOutput()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) && exit.ExitCode() == 2 && strings.Contains(string(out), "not a process of this machine") {
			t.Skip("the server does not run on this machine")
		}
		t.Fatalf("pg-cpu-split: %v: %s", err, out)
	}
	line := regexp.MustCompile(`(?m)^split: .*$`).FindString(string(out))
	if line == "" {
		t.Fatalf("no split line: %s", out)
	}
	cpu := func(class string) float64 {
		m := regexp.MustCompile(` ` + class + `=([0-9.]+)/`).FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("no %s in %q", class, line)
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	wall := func() float64 {
		v, _ := strconv.ParseFloat(regexp.MustCompile(`wall_s=([0-9.]+)`).FindStringSubmatch(line)[1], 64)
		return v
	}()
	backends, otherCPU, client := cpu("backends"), cpu("server-other"), cpu("client")
	// One burn each inside the window: the four outside would make
	// backends' figure five burns if the window were not kept. The server's
	// other processes include every other database's backends: on a
	// cluster shared with other tests they count more than the burn, never
	// less, so only backends' side is compared.
	if backends < 0.1 || otherCPU < 0.1 {
		t.Errorf("backends %.3f s, server-other %.3f s: want each burn's CPU (≥ 0.1 s) where it ran; %s", backends, otherCPU, line)
	}
	if backends > 1.6*otherCPU {
		t.Errorf("backends %.3f s against server-other %.3f s for the same statement: counted outside the window; %s",
			backends, otherCPU, line)
	}
	if backends > 1.2*wall+0.2 {
		t.Errorf("%.3f s of backends' CPU in a window of %.3f s with one burn of theirs: counted outside it; %s", backends, wall, line)
	}
	if client <= 0 || client > backends {
		t.Errorf("client %.3f s: want the psql processes' own CPU, small beside the burn's %.3f s; %s", client, backends, line)
	}
}
