package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
)

// Bounded list responses. The task lists (GET /v1/tasks, /v1/dlq,
// /v1/runs/{run_id}/tasks) answer summaries: each task without its
// payload, payload_size giving its length in bytes, read from the store
// without the payloads (ListParams.WithoutPayload). ?include=payload asks
// for the payloads. Either way a page stops before the item that would
// take the response body past Options.ListMaxBytes and answers
// next_cursor, so the client pages on; a page always holds at least one
// item, however large. The server reads the store in chunks and, for
// payloads, only as many as the budget can take (judged by payload_size),
// so its memory per request follows the budget, not the limit.

const (
	// MaxListLimit is the largest `limit` a list takes.
	MaxListLimit = 10000
	// DefaultListMaxBytes is Options.ListMaxBytes's default: 4 MiB.
	DefaultListMaxBytes = 4 << 20
	// listChunk is how many summaries one store read fetches.
	listChunk = 500
)

// listFunc reads one chunk of a listing.
type listFunc func(ctx context.Context, f backstop.ListParams) ([]*backstop.Task, error)

// takeInclude reads and removes ?include (one value, or comma-separated:
// "payload" is the only one) so the list's own query parser never sees it.
func takeInclude(q url.Values) (withPayload bool, err error) {
	vals, ok := q["include"]
	if !ok {
		return false, nil
	}
	q.Del("include")
	if len(vals) != 1 {
		return false, fail(codeInvalidQuery, "include: give it once")
	}
	for _, v := range strings.Split(vals[0], ",") {
		switch strings.TrimSpace(v) {
		case "payload":
			withPayload = true
		default:
			return false, fail(codeInvalidQuery, fmt.Sprintf("include %q: the only value is payload", vals[0]))
		}
	}
	return withPayload, nil
}

// summaryItem is a listed task without its payload: the shallower Payload
// (never set) hides the task's, so the key is left out.
type summaryItem struct {
	TaskView
	Payload json.RawMessage `json:"payload,omitempty"`
}

// listItem encodes one listed task as p may see it; a payload is masked
// without recording a raw view (the caller records the items it keeps).
func listItem(p principal, t *bt.Task, withPayload bool) ([]byte, error) {
	cp := *t
	if cp.Attributes == nil {
		cp.Attributes = map[string]string{}
	}
	cp.Executions = nil
	if !withPayload {
		cp.Payload = nil
		return json.Marshal(summaryItem{TaskView: TaskView{Task: &cp}})
	}
	cp.Payload = p.payloadFor(t)
	return json.Marshal(TaskView{Task: &cp})
}

// payloadKeyLen is what `,"payload":` adds to an item besides the payload.
const payloadKeyLen = len(`,"payload":`)

// writeList answers one page of a task listing (ListResponse) within the
// server's byte budget. f.Limit is the page's most items.
func (s *Server) writeList(w http.ResponseWriter, r *http.Request, f backstop.ListParams, withPayload bool, list listFunc) error {
	if f.Limit < 1 || f.Limit > MaxListLimit {
		return &backstop.ValidationError{Field: "limit", Message: fmt.Sprintf("must be between 1 and %d", MaxListLimit)}
	}
	ctx := r.Context()
	p := principalFrom(ctx)
	budget := s.opts.ListMaxBytes
	var buf bytes.Buffer
	buf.WriteString(`{"items":[`)
	// fits reports whether an item of n bytes, with the cursor to it, still
	// fits the budget after what the page holds.
	fits := func(items, n int, id string) bool {
		if items == 0 {
			return true // at least one item per page
		}
		tail := len(`],"next_cursor":""}`) + len(id) + 1 // and the newline
		return buf.Len()+1+n+tail <= budget
	}
	var (
		n      int
		last   string
		cursor = f.AfterID
		full   bool // stopped by the budget
	)
	for n < f.Limit && !full {
		q := f
		q.AfterID, q.Limit, q.WithoutPayload = cursor, min(f.Limit-n, listChunk), true
		page, err := list(ctx, q)
		if err != nil {
			return err
		}
		if len(page) == 0 {
			break
		}
		end := len(page) < q.Limit // nothing after this chunk
		tasks := page
		if withPayload {
			// Read the payloads of as many as the budget can take, judged by
			// their summaries and payload sizes (the real encoding decides
			// below: masking changes sizes).
			size, k := buf.Len(), 0
			for _, t := range page {
				item, err := listItem(p, t, false)
				if err != nil {
					return err
				}
				est := len(item) + payloadKeyLen + t.PayloadSize
				if n+k > 0 && size+1+est+len(`],"next_cursor":""}`)+len(t.ID)+1 > budget {
					break
				}
				size += 1 + est
				k++
			}
			if k == 0 {
				full = true
				break
			}
			q.WithoutPayload, q.Limit = false, k
			if tasks, err = list(ctx, q); err != nil {
				return err
			}
			end = end && len(tasks) == len(page)
		}
		for _, t := range tasks {
			item, err := listItem(p, t, withPayload)
			if err != nil {
				return err
			}
			if !fits(n, len(item), t.ID) {
				full = true
				break
			}
			if n > 0 {
				buf.WriteByte(',')
			}
			buf.Write(item)
			n++
			last = t.ID
			if withPayload && p.audit != nil && !p.worker {
				p.audit.add(t)
			}
		}
		if end || len(tasks) == 0 {
			break
		}
		cursor = last
	}
	buf.WriteString(`],"next_cursor":`)
	if n > 0 && (full || n == f.Limit) {
		b, _ := json.Marshal(last)
		buf.Write(b)
	} else {
		buf.WriteString("null")
	}
	buf.WriteString("}\n")
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(buf.Bytes())
	return nil
}
