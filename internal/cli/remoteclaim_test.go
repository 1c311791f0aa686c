package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"testing"
)

// claimCounter counts the worker's claim requests: how many, the tasks
// each asked for (max), and the most in flight at once.
type claimCounter struct {
	next http.Handler

	mu                      sync.Mutex
	requests, asked, maxMax int
	inFlight, maxInFlight   int
}

func (f *claimCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != "POST" || r.URL.Path != "/v1/claim" {
		f.next.ServeHTTP(w, r)
		return
	}
	b, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(b))
	var req struct {
		Max int `json:"max"`
	}
	_ = json.Unmarshal(b, &req)
	f.mu.Lock()
	f.requests++
	f.asked += req.Max
	f.maxMax = max(f.maxMax, req.Max)
	f.inFlight++
	f.maxInFlight = max(f.maxInFlight, f.inFlight)
	f.mu.Unlock()
	f.next.ServeHTTP(w, r)
	f.mu.Lock()
	f.inFlight--
	f.mu.Unlock()
}

// TestRemoteWorkClaimsForFreeSlots: `work --server` claims for all of a
// queue's free slots in one request, one request in flight at a time (an
// idle worker holds one long poll, not one per slot), and never asks for
// more than its free slots.
func TestRemoteWorkClaimsForFreeSlots(t *testing.T) {
	t.Parallel()
	const tasks, slots = 300, 32
	var f *claimCounter
	remoteDrain(t, "cq", tasks, func(next http.Handler) http.Handler {
		f = &claimCounter{next: next}
		return f
	})
	f.mu.Lock()
	defer f.mu.Unlock()
	t.Logf("%d tasks, %d slots: %d claim requests asking for %d tasks (at most %d in one), at most %d in flight",
		tasks, slots, f.requests, f.asked, f.maxMax, f.maxInFlight)
	if f.maxMax != slots {
		t.Errorf("the first claim asked for %d tasks, want every free slot (%d)", f.maxMax, slots)
	}
	if f.maxInFlight != 1 {
		t.Errorf("%d claim requests in flight at once, want 1", f.maxInFlight)
	}
	if f.requests >= tasks/2 {
		t.Errorf("%d claim requests for %d tasks, want far fewer than one per task", f.requests, tasks)
	}
}
