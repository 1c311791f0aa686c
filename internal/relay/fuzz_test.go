package relay_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/backstophq/backstop/internal/relay"
)

// A --sink flag is NAME=URL with a valid sink name and a nats, kafka or
// http(s) URL with a host, or an error naming the flag; never a panic.
func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{"bus=nats://127.0.0.1:4222", "log=kafka://h:9092?brokers=a:1,b:2", "hook=https://example.test/in",
		"=nats://h", "bus=", "bus", "bus=amqp://h", "a b=nats://h", "bus=nats://", "bus=http://[::1", "x=y=z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		name, raw, err := relay.ParseSpec(spec)
		if err != nil {
			if !strings.Contains(err.Error(), "--sink") {
				t.Fatalf("%q: error %q does not name the flag", spec, err)
			}
			return
		}
		if relay.ValidName(name) != nil {
			t.Fatalf("%q: accepted bad name %q", spec, name)
		}
		u, err := relay.ParseURL(raw)
		if err != nil || u.Host == "" || !slices.Contains(relay.Schemes, u.Scheme) {
			t.Fatalf("%q: accepted URL %q (%v)", spec, raw, err)
		}
	})
}
