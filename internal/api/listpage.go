package api

import (
	"bufio"
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

// listPayloadRead bounds the payload bytes one store read loads (at least
// one task): a page of payloads is read in such slices, not all at once.
const listPayloadRead = 1 << 20

// writeList answers one page of a task listing (ListResponse) within the
// server's byte budget; f.Limit is the page's most items. The body is
// streamed as it is encoded: the first chunk is read before anything is
// written (a refused filter is a problem document), and a store error
// after the answer started aborts the connection, so a client never takes
// a cut page for a whole one.
func (s *Server) writeList(w http.ResponseWriter, r *http.Request, f backstop.ListParams, withPayload bool, list listFunc) error {
	if f.Limit < 1 || f.Limit > MaxListLimit {
		return &backstop.ValidationError{Field: "limit", Message: fmt.Sprintf("must be between 1 and %d", MaxListLimit)}
	}
	ctx := r.Context()
	p := principalFrom(ctx)
	if err := whereAllowed(p, f.Where); err != nil {
		return err
	}
	budget := s.opts.ListMaxBytes
	var (
		bw      *bufio.Writer
		size    int    // bytes written so far
		n       int    // items written
		last    string // the last item's id
		full    bool   // stopped by the budget
		started bool
	)
	put := func(b []byte) {
		if bw == nil {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Content-Type-Options", "nosniff")
			w.WriteHeader(http.StatusOK)
			bw = bufio.NewWriterSize(w, 32<<10)
			started = true
		}
		_, _ = bw.Write(b)
		size += len(b)
	}
	// tail is what ends the page after an item with this id is the last.
	tail := func(id string) int { return len(`],"next_cursor":""}`) + len(id) + 1 }
	// fits reports whether an item of l bytes still fits after the items
	// written (the first always does).
	fits := func(l int, id string) bool { return n == 0 || size+1+l+tail(id) <= budget }
	add := func(t *bt.Task) (bool, error) {
		item, err := listItem(p, t, withPayload)
		if err != nil {
			return false, err
		}
		if !fits(len(item), t.ID) {
			return false, nil
		}
		if n == 0 {
			put([]byte(`{"items":[`))
		} else {
			put([]byte{','})
		}
		put(item)
		n++
		last = t.ID
		if withPayload && p.audit != nil && !p.worker {
			p.audit.add(t)
		}
		return true, nil
	}
	failed := func(err error) error {
		if !started {
			return err
		}
		_ = bw.Flush()
		s.log.Warn("api: a list failed after its answer started; aborting the response", "path", r.URL.Path, "error", err)
		panic(http.ErrAbortHandler)
	}
	cursor := f.AfterID
	for n < f.Limit && !full {
		q := f
		q.AfterID, q.Limit, q.WithoutPayload = cursor, min(f.Limit-n, listChunk), true
		page, err := list(ctx, q)
		if err != nil {
			return failed(err)
		}
		if len(page) == 0 {
			break
		}
		end := len(page) < q.Limit // nothing after this chunk
		if !withPayload {
			for _, t := range page {
				ok, err := add(t)
				if err != nil {
					return failed(err)
				}
				if !ok {
					full = true
					break
				}
			}
		}
		for i := 0; withPayload && i < len(page) && !full; {
			// A slice of the chunk whose payloads the budget can still
			// take, judged by summaries and payload sizes (the encoding
			// decides: masking changes sizes), at most listPayloadRead of
			// payload: read those payloads, write them.
			j, est, read := i, size, 0
			for j < len(page) {
				t := page[j]
				sum, err := listItem(p, t, false)
				if err != nil {
					return failed(err)
				}
				l := len(sum) + payloadKeyLen + t.PayloadSize
				if n+j-i > 0 && (est+1+l+tail(t.ID) > budget || (j > i && read+t.PayloadSize > listPayloadRead)) {
					break
				}
				est, read = est+1+l, read+t.PayloadSize
				j++
			}
			if j == i {
				full = true
				break
			}
			fq := f
			fq.AfterID, fq.Limit, fq.WithoutPayload = cursor, j-i, false
			tasks, err := list(ctx, fq)
			if err != nil {
				return failed(err)
			}
			for _, t := range tasks {
				ok, err := add(t)
				if err != nil {
					return failed(err)
				}
				if !ok {
					full = true
					break
				}
				cursor = last
			}
			if len(tasks) < j-i { // some went meanwhile: read on from the cursor
				end = false
				break
			}
			i = j
		}
		if end {
			break
		}
		if last != "" {
			cursor = last
		}
	}
	if n == 0 {
		put([]byte(`{"items":[`))
	}
	put([]byte(`],"next_cursor":`))
	if n > 0 && (full || n == f.Limit) {
		b, _ := json.Marshal(last)
		put(b)
	} else {
		put([]byte("null"))
	}
	put([]byte("}\n"))
	return bw.Flush() // an error: the client went away
}
