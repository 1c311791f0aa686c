// Package testnats starts a real nats-server with JetStream in the test's
// process, on a loopback port, for the tests of the NATS sink, the relay
// and ingest.
package testnats

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Start runs a nats-server with JetStream on 127.0.0.1:port (-1: any free
// port), storing in dir, until the test ends (or Shutdown, which may be
// called earlier: a broker that goes away). Started again on the same port
// and dir, it keeps its streams.
func Start(t testing.TB, port int, dir string) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(s.Shutdown)
	return s
}
