package cli

import (
	"runtime/debug"
	"strings"
	"testing"
)

// TestVersionNamesTheRevision: a binary built from a checkout carries
// vcs.* settings (go build, go install); version prints the revision and
// whether the tree had uncommitted changes. cmd/backstop's
// TestVersionMatchesBuildInfo checks the real binary against go version -m.
func TestVersionNamesTheRevision(t *testing.T) {
	bi, err := debug.ParseBuildInfo("path\tgithub.com/backstophq/backstop/cmd/backstop\n" +
		"mod\tgithub.com/backstophq/backstop\t(devel)\t\n" +
		"build\tvcs=git\nbuild\tvcs.revision=0123456789abcdef0123456789abcdef01234567\n" +
		"build\tvcs.time=2026-11-24T20:00:00Z\nbuild\tvcs.modified=true\n")
	if err != nil {
		t.Fatal(err)
	}
	bi.GoVersion = "go1.26.8"
	got := versionOf(bi).String()
	for _, want := range []string{"(devel)", "revision 0123456789abcdef0123456789abcdef01234567", "uncommitted changes", "2026-11-24T20:00:00Z", "go1.26.8"} {
		if !strings.Contains(got, want) {
			t.Errorf("version %q lacks %q", got, want)
		}
	}
	bi.Settings = nil
	if got := versionOf(bi).String(); !strings.Contains(got, "revision unknown") {
		t.Errorf("without VCS settings: %q, want it to say the revision is unknown", got)
	}
}
