package cli

import (
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/pflag"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/taskjson"
)

// parseAttr reads one --attr k=v. The key must be a valid attribute key; the
// value may contain anything, '=' included.
func parseAttr(s string) (key, value string, err error) { return parseKeyValue("--attr", s) }

// parseKeyValue reads one k=v of flag: an attribute's rules (a worker's
// labels follow them too).
func parseKeyValue(flag, s string) (key, value string, err error) {
	key, value, ok := strings.Cut(s, "=")
	if !ok {
		return "", "", usageErr("%s %q: want key=value", flag, s)
	}
	if err := backstop.ValidateAttributes(map[string]string{key: value}); err != nil {
		return "", "", usageErr("%s %q: %v", flag, s, err)
	}
	return key, value, nil
}

// parseAttrs reads repeated --attr flags into a map (nil when none). A key
// given twice is an error rather than a silent overwrite.
func parseAttrs(list []string) (map[string]string, error) { return parseKeyValues("--attr", list) }

// parseKeyValues reads a repeated k=v flag into a map (nil when none).
func parseKeyValues(flag string, list []string) (map[string]string, error) {
	if len(list) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(list))
	for _, s := range list {
		k, v, err := parseKeyValue(flag, s)
		if err != nil {
			return nil, err
		}
		if _, dup := m[k]; dup {
			return nil, usageErr("%s: key %q is given twice", flag, k)
		}
		m[k] = v
	}
	if err := backstop.ValidateAttributes(m); err != nil {
		return nil, usageErr("%s: %v", flag, err)
	}
	return m, nil
}

// parseSchedule reads --retry-schedule "100ms,1s,10s" (the last delay repeats).
func parseSchedule(s string) ([]bt.Duration, error) {
	sched, err := bt.ParseSchedule(s)
	if err != nil {
		return nil, usageErr("--retry-schedule: %v", err)
	}
	return sched, nil
}

// parseTime reads an RFC 3339 time given to the named flag; the result is UTC.
func parseTime(flag, s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, usageErr("--%s %q: want an RFC 3339 time such as 2030-01-02T15:04:05Z", flag, s)
	}
	// The zero time would read as "not given"; year 1 or 10000 is a typo.
	if err := backstop.CheckTime(flag, t); err != nil {
		return time.Time{}, usageErr("--%v", err)
	}
	return t.UTC(), nil
}

// parseStates reads --state, one state or a comma-separated list. The
// library names unknown states.
func parseStates(s string) []bt.State {
	if s == "" {
		return nil
	}
	var out []bt.State
	for _, part := range strings.Split(s, ",") {
		out = append(out, bt.State(strings.TrimSpace(part)))
	}
	return out
}

// decodeBatchLine decodes one NDJSON record of a batch file.
func decodeBatchLine(line []byte) (backstop.EnqueueParams, error) {
	return taskjson.DecodeEnqueue(line)
}

// pathFlags name files, whose names need not be UTF-8 on every system.
var pathFlags = map[string]bool{"payload-file": true, "batch-file": true, "merge-patch": true, "out": true,
	"db": true, "config": true, "cpuprofile": true, "memprofile": true}

// checkTextFlags refuses a text flag that is not valid UTF-8 or holds a NUL:
// the value would reach JSON (a payload, a key, a reason) and either be
// refused deep inside or, sent to a server, silently become U+FFFD. One
// check for every command, before any of them runs.
func checkTextFlags(fs *pflag.FlagSet) error {
	var bad error
	fs.Visit(func(fl *pflag.Flag) {
		if bad != nil || pathFlags[fl.Name] {
			return
		}
		switch fl.Value.Type() {
		case "string", "stringArray", "stringSlice":
		default:
			return
		}
		if v := fl.Value.String(); !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0 {
			if len(v) > 64 { // a --payload can be large
				v = v[:64] + "…"
			}
			bad = usageErr("--%s %q: is not valid UTF-8 text (or holds a NUL)", fl.Name, v)
		}
	})
	return bad
}
