package cli

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"runtime/debug"

	"github.com/spf13/cobra"
)

func init() { register(versionCmd) }

// buildVersion is what this binary knows about its build: the module
// version, and the VCS revision the go command stamps into binaries built
// from a checkout (go build, go install; not go run, which builds without
// it).
type buildVersion struct {
	Version  string `json:"version"`
	Revision string `json:"revision,omitempty"`
	Time     string `json:"time,omitempty"`
	Modified bool   `json:"modified"`
	Go       string `json:"go"`
}

func readBuildVersion() buildVersion {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return buildVersion{Version: "unknown"}
	}
	return versionOf(bi)
}

func versionOf(bi *debug.BuildInfo) buildVersion {
	var v buildVersion
	v.Version, v.Go = bi.Main.Version, bi.GoVersion
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

// String is the one line `backstop version` and `--version` print.
func (v buildVersion) String() string {
	if v.Revision == "" {
		return fmt.Sprintf("backstop %s (revision unknown: built without VCS information, e.g. by go run), %s", v.Version, v.Go)
	}
	mod := ""
	if v.Modified {
		mod = " with uncommitted changes"
	}
	return fmt.Sprintf("backstop %s revision %s%s (committed %s), %s", v.Version, v.Revision, mod, v.Time, v.Go)
}

// short is the version a worker registers: the module version and the
// revision's first 12 characters ("+dirty" with uncommitted changes).
func (v buildVersion) short() string {
	if v.Revision == "" {
		return v.Version
	}
	dirty := ""
	if v.Modified {
		dirty = "+dirty"
	}
	return fmt.Sprintf("%s %.12s%s", v.Version, v.Revision, dirty)
}

func versionCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version and the VCS revision this binary was built from (also --version)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := readBuildVersion()
			return a.print(v, func(w io.Writer) error {
				_, err := fmt.Fprintln(w, v)
				return err
			})
		},
	}
}

// The runner label a worker the CLI starts carries in the registry (the
// console's Workers page tells them apart by it): exec for `backstop work`
// (a program per task, over the database or --server), serve for the
// in-process workers of `backstop serve`.
const (
	runnerLabel = "runner"
	runnerExec  = "exec"
	runnerServe = "serve"
)

func runnerLabels(runner string) map[string]string { return map[string]string{runnerLabel: runner} }

// registryLabels are a work process's labels in the worker registry: the
// runner (exec), then --label's (which may replace it).
func (o *workOptions) registryLabels() map[string]string {
	l := runnerLabels(runnerExec)
	maps.Copy(l, o.labels)
	return l
}

// registryVersion is --version, else this binary's.
func (o *workOptions) registryVersion() string {
	return cmp.Or(o.version, readBuildVersion().short())
}
