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

// --streams is a list of distinct valid stream names (all alone), or an
// error naming the flag; --streams-topic, once {type} is put in, is a
// token list of letters, digits, '.', '_' and '-'. Never a panic.
func FuzzParseStreams(f *testing.F) {
	for _, s := range []string{"all", "queue.q,type.task.dead_lettered,run.r1", "all,queue.q", "queue.q,queue.q", "", ",",
		"bogus.x", "queue.", "audit", "node.h, execution.e", "type.a b", "queue.\x00"} {
		f.Add(s, "backstop.events.{type}")
	}
	f.Add("all", "a.{type}.b")
	f.Add("all", "{type}")
	f.Fuzz(func(t *testing.T, spec, topic string) {
		streams, err := relay.ParseStreams(spec)
		if err != nil {
			if !strings.Contains(err.Error(), "--streams") {
				t.Fatalf("%q: error %q does not name the flag", spec, err)
			}
		} else {
			if len(streams) == 0 || slices.Contains(streams, "all") && len(streams) > 1 {
				t.Fatalf("%q: accepted %v", spec, streams)
			}
			seen := map[string]bool{}
			for _, s := range streams {
				if seen[s] {
					t.Fatalf("%q: %s twice", spec, s)
				}
				seen[s] = true
			}
		}
		if relay.CheckTopic(topic) == nil {
			plain := strings.ReplaceAll(topic, "{type}", "t")
			if plain == "" || strings.Contains(plain, "..") || strings.HasPrefix(plain, ".") || strings.HasSuffix(plain, ".") ||
				strings.Trim(plain, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != "" {
				t.Fatalf("topic %q accepted", topic)
			}
		}
	})
}
