package ingest

import (
	"fmt"
	"strings"

	"github.com/backstophq/backstop"
)

// Spec is one ingester as the command line (`backstop ingest`'s flags) or
// the configuration (an entry of its ingest: list) states it: the source
// and the mapping, as text.
type Spec struct {
	Source
	Queue, Kind                                        string
	IDField, IDHeader, OrderingKeyField, SequenceField string
	MaxAttempts                                        int
}

// KeyName names a Spec's setting in an error: key is the setting's
// configuration key (from, topic, id_field...). FlagName gives the
// command line's flag; a configuration names the key path.
type KeyName func(key string) string

// FlagName is the flag of a setting: --id-field for id_field.
func FlagName(key string) string { return "--" + strings.ReplaceAll(key, "_", "-") }

// Mapping checks the spec and makes its mapping; nothing is opened. The
// error names the setting at fault with name.
func (s *Spec) Mapping(name KeyName) (Mapping, error) {
	m := Mapping{Queue: s.Queue, Kind: s.Kind, IDHeader: s.IDHeader, MaxAttempts: s.MaxAttempts}
	if s.URL == "" {
		return m, fmt.Errorf("%s is required (kafka://HOST:PORT or nats://HOST:PORT)", name("from"))
	}
	if err := s.check(name); err != nil {
		return m, err
	}
	if s.Batch < 1 {
		return m, fmt.Errorf("%s %d: want 1 to 10000", name("batch"), s.Batch)
	}
	for _, r := range []struct{ key, v string }{{"queue", s.Queue}, {"kind", s.Kind}} {
		if r.v == "" {
			return m, fmt.Errorf("%s is required", name(r.key))
		}
		if err := backstop.ValidID(r.v); err != nil {
			return m, fmt.Errorf("%s: %v", name(r.key), err)
		}
	}
	if s.IDField != "" && s.IDHeader != "" {
		return m, fmt.Errorf("give %s or %s, not both", name("id_field"), name("id_header"))
	}
	if (s.OrderingKeyField == "") != (s.SequenceField == "") {
		return m, fmt.Errorf("%s and %s go together", name("ordering_key_field"), name("sequence_field"))
	}
	if s.MaxAttempts < 0 || s.MaxAttempts > backstop.MaxAttemptsLimit {
		return m, fmt.Errorf("%s must be between 0 and %d", name("max_attempts"), backstop.MaxAttemptsLimit)
	}
	for _, p := range []struct {
		key, v string
		to     **Path
	}{{"id_field", s.IDField, &m.IDField}, {"ordering_key_field", s.OrderingKeyField, &m.OrderingKeyField},
		{"sequence_field", s.SequenceField, &m.SequenceField}} {
		if p.v == "" {
			continue
		}
		path, err := ParsePath(p.v)
		if err != nil {
			return m, fmt.Errorf("%s: %v", name(p.key), err)
		}
		*p.to = path
	}
	return m, nil
}

// LeaseName is the leadership lease of the ingesters of one topic (or
// subject) and group: ingest.GROUP.TOPIC.
func (s *Source) LeaseName(queue string) string {
	return "ingest." + s.group(queue) + "." + s.Topic + s.Subject
}

// group is the consumer group: Group, else DefaultGroup(queue).
func (s *Source) group(queue string) string {
	if s.Group != "" {
		return s.Group
	}
	return DefaultGroup(queue)
}
