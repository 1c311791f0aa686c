// Package scripts holds the tests of the shell scripts next to it.
package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// stubs is a PATH holding only what scripts/deps needs (bash, env, true),
// an id that answers uid, and an apt-get that records its calls in
// apt.log and "installs" a package by creating its command.
func stubs(t *testing.T, uid string, sudo bool, have ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"bash", "env", "true"} {
		p, err := exec.LookPath(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(p, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!"+mustLook(t, "bash")+"\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write("id", "echo "+uid+"\n")
	write("apt-get", `d=`+dir+`
echo "DEBIAN_FRONTEND=$DEBIAN_FRONTEND $*" >> "$d/apt.log"
for p in "$@"; do
	case "$p" in
	prometheus) c=promtool;; chromium) c=chromium;; nodejs) c=node;; npm) c=npm;; postgresql) c=initdb;; *) continue;;
	esac
	printf '#!/bin/sh\n' > "$d/$c"; `+mustLook(t, "chmod")+` +x "$d/$c"
done
`)
	if sudo {
		write("sudo", `[ "$1" = -n ] && shift; echo "sudo $*" >> `+dir+`/sudo.log; exec "$@"`+"\n")
	}
	for _, c := range have {
		write(c, "")
	}
	return dir
}

func mustLook(t *testing.T, name string) string {
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// deps runs scripts/deps with PATH=path and env; it returns the output
// and the exit code.
func deps(t *testing.T, path string, env ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(path, "bash"), "deps")
	cmd.Env = append([]string{"PATH=" + path, "HOME=" + t.TempDir()}, env...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

func read(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

// TestDepsInstallsWhatIsMissing: scripts/deps (run first by scripts/test)
// installs the missing Debian packages with apt-get, update first, as root
// or through a password-less sudo; otherwise it stops with the one command
// to run; the OpenAPI lint's packages are optional unless required; the
// dry run prints what it would run and runs nothing.
func TestDepsInstallsWhatIsMissing(t *testing.T) {
	t.Parallel()
	pg := ""
	if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb"); len(m) == 0 {
		pg = "postgresql " // Debian keeps initdb off PATH; deps looks there too
	}
	want := "--no-install-recommends " + pg + "prometheus chromium nodejs npm"

	t.Run("root dry run", func(t *testing.T) {
		path := stubs(t, "0", false)
		out, code := deps(t, path, "BACKSTOP_TEST_DRY_RUN_INSTALL=1")
		if code != 0 || !strings.Contains(out, "would run:\n  apt-get update\n  env DEBIAN_FRONTEND=noninteractive apt-get install -y "+want+"\n") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		if log := read(t, filepath.Join(path, "apt.log")); log != "" {
			t.Fatalf("the dry run ran apt-get: %s", log)
		}
	})
	t.Run("root installs", func(t *testing.T) {
		path := stubs(t, "0", false)
		out, code := deps(t, path)
		log := read(t, filepath.Join(path, "apt.log"))
		if code != 0 || log != "DEBIAN_FRONTEND= update\nDEBIAN_FRONTEND=noninteractive install -y "+want+"\n" {
			t.Fatalf("exit %d:\n%s\napt-get calls:\n%s", code, out, log)
		}
		if out, code := deps(t, path); code != 0 || out != "" {
			t.Fatalf("second run (nothing missing): exit %d %q", code, out)
		}
	})
	t.Run("password-less sudo", func(t *testing.T) {
		path := stubs(t, "1000", true)
		out, code := deps(t, path, "BACKSTOP_TEST_DRY_RUN_INSTALL=1")
		if code != 0 || !strings.Contains(out, "  sudo apt-get update\n  sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y "+want) {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		if _, code := deps(t, path); code != 0 || !strings.Contains(read(t, filepath.Join(path, "sudo.log")), "sudo apt-get update") {
			t.Fatalf("install through sudo: exit %d, sudo calls %q", code, read(t, filepath.Join(path, "sudo.log")))
		}
	})
	t.Run("cannot install", func(t *testing.T) {
		path := stubs(t, "1000", false)
		out, code := deps(t, path)
		if code != 1 || !strings.Contains(out, "  sudo apt-get update && sudo apt-get install -y "+want+"\n") {
			t.Fatalf("exit %d, want 1 with the command to run:\n%s", code, out)
		}
		if log := read(t, filepath.Join(path, "apt.log")); log != "" {
			t.Fatalf("ran apt-get without the rights: %s", log)
		}
	})
	t.Run("only the lint missing", func(t *testing.T) {
		path := stubs(t, "1000", false, "promtool", "initdb", "chromium")
		if out, code := deps(t, path); code != 0 || !strings.Contains(out, "the OpenAPI lint is skipped") {
			t.Fatalf("exit %d, want 0 skipping the lint:\n%s", code, out)
		}
		if out, code := deps(t, path, "BACKSTOP_REQUIRE_OPENAPI_LINT=1"); code != 1 || !strings.Contains(out, "apt-get install -y --no-install-recommends nodejs npm") {
			t.Fatalf("lint required: exit %d, want 1:\n%s", code, out)
		}
	})
}
