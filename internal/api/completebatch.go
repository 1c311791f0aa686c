package api

import (
	"encoding/json"
	"fmt"
	"net/http"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/remote"
)

// MaxCompleteBatch is the most completions one POST /v1/tasks/complete
// may carry.
const MaxCompleteBatch = 1000

// CompleteBatchRequest is POST /v1/tasks/complete: many successful
// attempts in one request (a worker that claimed several tasks).
type CompleteBatchRequest struct {
	Completions []CompletionItem `json:"completions"`
}

// CompletionItem is one attempt of a batch completion.
type CompletionItem struct {
	TaskID     string       `json:"task_id"`
	LeaseToken string       `json:"lease_token"`
	Progress   *bt.Progress `json:"progress,omitempty"`
	// Result is the attempt's JSON result, as CompleteRequest's.
	Result json.RawMessage `json:"result,omitempty"`
}

// CompletionResult answers one item, in the order of the request: the
// decision, or the problem that refused it (a stale lease is
// lease_not_current; nothing changed for that task).
type CompletionResult struct {
	TaskID  string         `json:"task_id"`
	Result  *remote.Result `json:"result,omitempty"`
	Problem *Problem       `json:"problem,omitempty"`
}

// CompleteBatchResponse lists the results in request order.
type CompleteBatchResponse struct {
	Results []CompletionResult `json:"results"`
}

func (s *Server) completeBatch(w http.ResponseWriter, r *http.Request) error {
	var req CompleteBatchRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	if len(req.Completions) == 0 {
		return &apiError{code: codeInvalidInput, field: "completions", detail: "completions: give at least one"}
	}
	if len(req.Completions) > MaxCompleteBatch {
		return &apiError{code: codeTooLarge, field: "completions",
			detail: fmt.Sprintf("completions: at most %d per request, got %d", MaxCompleteBatch, len(req.Completions))}
	}
	cs := make([]remote.Completion, len(req.Completions))
	for i, c := range req.Completions {
		cs[i] = remote.Completion{TaskID: c.TaskID, LeaseToken: c.LeaseToken, Progress: c.Progress, Result: c.Result}
	}
	outs, err := s.rp.CompleteMany(actorContext(r), cs)
	if err != nil {
		return err
	}
	res := CompleteBatchResponse{Results: make([]CompletionResult, len(outs))}
	for i, o := range outs {
		res.Results[i] = CompletionResult{TaskID: cs[i].TaskID, Result: o.Result}
		if o.Err != nil {
			p, _ := problemFor(o.Err)
			res.Results[i].Problem = p
		}
	}
	return writeJSON(w, http.StatusOK, res)
}
