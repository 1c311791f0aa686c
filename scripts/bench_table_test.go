package scripts

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// bench-table refuses bad arguments before it builds or writes anything:
// exit 2 and a message naming the argument.
func TestBenchTableRefusesBadArguments(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  []string
		want string
	}{
		{[]string{"--rows", "floor,bogus"}, nil, "unknown row bogus"},
		{[]string{"--runs", "0"}, nil, "--runs must be a positive integer"},
		{[]string{"-n", "ten"}, nil, "-n must be a positive integer"},
		{[]string{"--fast"}, nil, "unknown argument --fast"},
		{nil, []string{"BACKSTOP_TEST_POSTGRES_URL="}, "BACKSTOP_TEST_POSTGRES_URL is not set"},
	} {
		cmd := exec.Command("bash", append([]string{"bench-table"}, c.args...)...)
		cmd.Env = append([]string{"PATH=/usr/bin:/bin", "BACKSTOP_TEST_POSTGRES_URL=postgres://127.0.0.1:1/none"}, c.env...)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Errorf("%v: err %v, want exit 2; output %s", c.args, err, out)
			continue
		}
		if !strings.Contains(string(out), c.want) || strings.Contains(string(out), "building") {
			t.Errorf("%v: output %q, want %q and no build", c.args, out, c.want)
		}
	}
}
