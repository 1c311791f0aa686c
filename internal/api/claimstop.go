package api

import (
	"net/http"
	"sync"
	"time"
)

// A draining remote worker must not cut its claim's long poll: once the
// claim has leased tasks, an answer the worker does not read strands them
// as running until their leases expire (charged as lease_expired), and no
// check of the request's context on the server closes that window (the
// worker can hang up after the check, or while the answer is written or
// read). So the worker names each claim (claim_id) and, when it drains,
// asks the server to stop that claim (POST /v1/claims/{claim_id}/stop):
// the claim takes no more tasks and answers at once with what it holds,
// and the worker reads the answer and gives those tasks back uncharged.

// claimStopMemory is how long a stop that found no claim here is kept: a
// claim with that id arriving later (its request overtaken by the stop)
// answers at once, with no tasks.
const claimStopMemory = 2 * time.Minute

// maxClaimStops bounds the stops kept for claims not (yet) seen.
const maxClaimStops = 10000

// claimStops holds this server's named claims while they run, and the
// stops that came for a claim it does not hold.
type claimStops struct {
	mu      sync.Mutex
	live    map[string]chan struct{} // claim id → closed by its stop
	stopped map[string]time.Time     // claim id → when a stop came for it before the claim
}

// start registers the claim id; stop is closed when a stop comes for it
// (already closed when one came first). done forgets the claim.
func (c *claimStops) start(id string) (stop <-chan struct{}, done func()) {
	ch := make(chan struct{})
	if id == "" {
		return ch, func() {}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.stopped[id]; ok {
		delete(c.stopped, id)
		close(ch)
		return ch, func() {}
	}
	if _, ok := c.live[id]; ok {
		// The same id twice at once (a client's bug, or a retried
		// request): the second claim is not stoppable by name; the first
		// keeps it.
		return ch, func() {}
	}
	if c.live == nil {
		c.live = map[string]chan struct{}{}
	}
	c.live[id] = ch
	return ch, func() {
		c.mu.Lock()
		if c.live[id] == ch {
			delete(c.live, id)
		}
		c.mu.Unlock()
	}
}

// stop ends the wait of claim id and says whether this server held it.
// When it did not, the stop is kept for claimStopMemory, for a claim
// that has not arrived yet.
func (c *claimStops) stop(id string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ch, ok := c.live[id]; ok {
		delete(c.live, id)
		close(ch)
		return true
	}
	if c.stopped == nil {
		c.stopped = map[string]time.Time{}
	}
	if len(c.stopped) >= maxClaimStops/2 {
		for k, at := range c.stopped {
			if now.Sub(at) > claimStopMemory {
				delete(c.stopped, k)
			}
		}
	}
	if len(c.stopped) < maxClaimStops {
		c.stopped[id] = now
	}
	return false
}

// ClaimStopResponse is POST /v1/claims/{claim_id}/stop's answer.
type ClaimStopResponse struct {
	// Held: this server held the claim (waiting, or claiming): it answers
	// at once with the tasks it leased, if any. False: the claim already
	// answered, has not arrived yet (it will answer at once, with no
	// tasks, for the next two minutes), or runs on another server (behind
	// a balancer; its wait then runs out as usual).
	Held bool `json:"held"`
}

func (s *Server) stopClaim(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("claim_id")
	if err := checkClaimID(id); err != nil {
		return err
	}
	held := s.stops.stop(id, time.Now())
	s.log.Debug("claim stop", "claim_id", id, "held", held)
	return writeJSON(w, http.StatusOK, ClaimStopResponse{Held: held})
}

// checkClaimID: a claim id is 1-128 characters of [A-Za-z0-9._:-].
func checkClaimID(id string) error {
	ok := len(id) > 0 && len(id) <= 128
	for i := 0; ok && i < len(id); i++ {
		c := id[i]
		ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-'
	}
	if !ok {
		return &apiError{code: codeInvalidInput, field: "claim_id", detail: "claim_id: 1-128 characters of A-Z a-z 0-9 . _ : -"}
	}
	return nil
}
