package relay_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/relay"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/internal/testwait"
)

// hook is an httptest webhook receiver recording what it accepted.
type hook struct {
	mu       sync.Mutex
	accepted []streamMsg
	calls    map[string]int // by message id
	answer   func(id string, call int) int
}

func newHook(t *testing.T, answer func(id string, call int) int) (*hook, *httptest.Server) {
	h := &hook{calls: map[string]int{}, answer: answer}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		id := r.Header.Get("Backstop-Message-Id")
		h.mu.Lock()
		h.calls[id]++
		call := h.calls[id]
		h.mu.Unlock()
		code := h.answer(id, call)
		if code == 0 { // hang past the sink's timeout
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
			return
		}
		if code < 300 {
			h.mu.Lock()
			hd := map[string][]string(r.Header.Clone())
			h.accepted = append(h.accepted, streamMsg{id: id, key: r.Header.Get("Backstop-Key"), subject: r.Header.Get("Backstop-Topic"), data: body, headers: hd})
			h.mu.Unlock()
		}
		w.WriteHeader(code)
		fmt.Fprintf(w, "answer %d", code)
	}))
	t.Cleanup(srv.Close)
	return h, srv
}

func (h *hook) got() []streamMsg {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]streamMsg(nil), h.accepted...)
}

// A webhook that fails (503), throttles (429), times out, and refuses
// (400): the transient answers are retried by policy, the refusal
// dead-letters with the receiver's answer; bodies are signed.
func TestWebhookStatusClassification(t *testing.T) {
	ctx := context.Background()
	c := client(t, "sqlite://"+t.TempDir()+"/b.db", nil)
	plan := map[string][]int{} // by topic: answers per call
	plan["flaky"] = []int{503, 429, 0, 200}
	plan["refused"] = []int{400}
	ids := map[string]string{}
	for topic := range plan {
		rs, err := c.Publish(ctx, backstop.Message{Sink: "hook", Topic: topic, Payload: []byte(`{"topic":"` + topic + `"}`),
			Headers: map[string]string{"X-Topic": topic}})
		if err != nil {
			t.Fatal(err)
		}
		ids[rs[0].Task.ID] = topic
	}
	h, srv := newHook(t, func(id string, call int) int {
		p := plan[ids[id]]
		return p[min(call, len(p))-1]
	})
	secret := "s3cret"
	startRelay(t, c, map[string]relay.Sink{"hook": openSink(t, "hook", srv.URL, relay.Options{Timeout: 300 * time.Millisecond, Secret: secret})})
	for id, topic := range ids {
		switch topic {
		case "flaky":
			task := waitState(t, c, id, backstop.StateSucceeded)
			if len(task.Executions) != 4 {
				t.Fatalf("flaky: %d attempts, want 4", len(task.Executions))
			}
			for i, want := range []string{"503", "429", "Timeout"} {
				if !strings.Contains(task.Executions[i].Error, want) {
					t.Fatalf("flaky attempt %d: error %q, want %s", i+1, task.Executions[i].Error, want)
				}
			}
		case "refused":
			task := waitState(t, c, id, backstop.StateDead)
			if task.DeadReason != backstop.ReasonPermanentError || !strings.Contains(task.LastError, "400") || !strings.Contains(task.LastError, "answer 400") {
				t.Fatalf("refused: reason %s, error %q", task.DeadReason, task.LastError)
			}
		}
	}
	got := h.got()
	if len(got) != 1 {
		t.Fatalf("accepted %d, want 1", len(got))
	}
	m := got[0]
	if sig := m.headers.Get(relay.SignatureHeader); sig != relay.Sign([]byte(secret), m.data) || !strings.HasPrefix(sig, "sha256=") {
		t.Fatalf("signature %q", sig)
	}
	if m.headers.Get("X-Topic") != "flaky" || m.subject != "flaky" {
		t.Fatalf("headers %v", m.headers)
	}
}

// Per-key order under transient failures: a receiver that answers 503 to
// a third of the calls still receives each key's messages once each, in
// publish order (a retried message holds its key's later ones back).
func TestPerKeyOrderUnderFailures(t *testing.T) {
	testdb.EachStore(t, func(t *testing.T, db string) {
		ctx := context.Background()
		c := client(t, db, &backstop.Config{MaxAttempts: 1000})
		var mu sync.Mutex
		rnd := rand.New(rand.NewPCG(1, 2))
		h, srv := newHook(t, func(string, int) int {
			mu.Lock()
			defer mu.Unlock()
			if rnd.IntN(3) == 0 {
				return 503
			}
			return 200
		})
		const keys, per = 5, 20
		want := map[string][]string{}
		for i := range per {
			for k := range keys {
				key := fmt.Sprintf("k%d", k)
				rs, err := c.Publish(ctx, backstop.Message{Sink: "hook", Topic: "t", Key: key, Payload: []byte(fmt.Sprint(i))})
				if err != nil {
					t.Fatal(err)
				}
				want[key] = append(want[key], rs[0].Task.ID)
			}
		}
		startRelay(t, c, map[string]relay.Sink{"hook": openSink(t, "hook", srv.URL, relay.Options{})})
		testwait.For(t, "every message accepted", func() bool { return len(h.got()) >= keys*per })
		checkOrder(t, want, h.got())
	})
}
