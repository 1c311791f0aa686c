package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/engine"
)

// The dead-letter endpoints. Reads are open to viewers (payloads and patch
// values redacted below operator); every change is the admin's. Each calls
// the one library function for it (dlq.go, redrive.go at the root), with
// the token's name as the actor recorded in the task's history.

// ParseDLQQuery reads the filters of GET /v1/dlq and /v1/dlq/export:
// queue, kind, reason, status (repeatable or comma-separated),
// error_contains, attr (repeatable key=value), since and until (RFC 3339,
// or an age such as 24h or 7d: that long before now), where (a CEL
// condition on the payload and attributes), order (oldest, the default, or
// newest), workflow, run_id and step (the
// attributes workflow, run_id and step_id of workflow steps' tasks:
// backstop.StepSelection), after (the cursor) and limit. Unknown parameters
// are refused; the library checks values.
func ParseDLQQuery(q url.Values, now time.Time, defaultLimit int) (backstop.ListParams, error) {
	var f backstop.ListParams
	bad := func(format string, args ...any) error {
		return fail(codeInvalidQuery, fmt.Sprintf(format, args...))
	}
	for key, vals := range q {
		switch key {
		case "queue", "kind", "reason", "error_contains", "since", "until", "limit", "after", "where", "workflow", "run_id", "step", "order":
			if len(vals) != 1 {
				return f, bad("%s: give it once", key)
			}
		case "status", "attr":
		default:
			return f, bad("unknown parameter %q (use queue, kind, reason, status, error_contains, attr, since, until, where, workflow, run_id, step, order, limit, after)", key)
		}
	}
	var err error
	if f.Newest, err = parseOrder(q.Get("order")); err != nil {
		return f, err
	}
	f.Queue, f.Kind, f.AfterID = q.Get("queue"), q.Get("kind"), q.Get("after")
	f.Reason, f.ErrorContains = bt.DeadReason(q.Get("reason")), q.Get("error_contains")
	f.Where = q.Get("where")
	for _, v := range q["status"] {
		for _, st := range strings.Split(v, ",") {
			f.DLQStatuses = append(f.DLQStatuses, bt.DLQStatus(strings.TrimSpace(st)))
		}
	}
	if f.Attrs, err = parseAttrs(q["attr"]); err != nil {
		return f, err
	}
	if f, err = (backstop.StepSelection{Workflow: q.Get("workflow"), RunID: q.Get("run_id"), Step: q.Get("step")}).Apply(f); err != nil {
		return f, err
	}
	for _, w := range []struct {
		key string
		dst *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		v := q.Get(w.key)
		if v == "" {
			continue
		}
		t, err := parseWhen(v, now)
		if err != nil {
			return f, bad("%s %q: want an RFC 3339 time or an age such as 24h or 7d", w.key, v)
		}
		*w.dst = t
	}
	f.Limit = defaultLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return f, bad("limit %q: want a positive whole number", v)
		}
		f.Limit = n
	}
	return f, nil
}

// parseOrder reads a list's order: oldest (the default: ids ascending) or
// newest (ids descending; the cursor pages on toward older ids).
func parseOrder(v string) (newest bool, err error) {
	switch v {
	case "", "oldest":
		return false, nil
	case "newest":
		return true, nil
	}
	return false, fail(codeInvalidQuery, fmt.Sprintf("order %q: want newest or oldest", v))
}

func parseAttrs(vals []string) (map[string]string, error) {
	var out map[string]string
	for _, v := range vals {
		k, val, ok := strings.Cut(v, "=")
		if !ok {
			return nil, fail(codeInvalidQuery, fmt.Sprintf("attr %q: want key=value", v))
		}
		if out == nil {
			out = map[string]string{}
		}
		if _, dup := out[k]; dup {
			return nil, fail(codeInvalidQuery, fmt.Sprintf("attr: key %q is given twice", k))
		}
		out[k] = val
	}
	return out, nil
}

// parseWhen reads an RFC 3339 time, or an age ("90m", "24h", "7d",
// "1d12h") counted back from now.
func parseWhen(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), nil
	}
	d, err := bt.ParseAge(s)
	if err != nil {
		return time.Time{}, err
	}
	return now.Add(-d), nil
}

// GET /v1/dlq: summaries, or payloads with ?include=payload, within the
// byte budget (listpage.go).
func (s *Server) listDLQ(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	withPayload, err := takeInclude(q)
	if err != nil {
		return err
	}
	f, err := ParseDLQQuery(q, s.now(), defaultListLimit)
	if err != nil {
		return err
	}
	return s.writeList(w, r, f, withPayload, s.c.DeadLetters)
}

// DLQGroups is GET /v1/dlq/groups.
type DLQGroups = backstop.DeadLetterGroups

// GET /v1/dlq/groups: the dead letters of GET /v1/dlq's filters counted by
// reason and by error (limit: how many errors, default 20).
func (s *Server) groupDLQ(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	if q.Has("after") {
		return fail(codeInvalidQuery, `unknown parameter "after" (groups count the whole filter)`)
	}
	f, err := ParseDLQQuery(q, s.now(), 0)
	if err != nil {
		return err
	}
	if err := whereAllowed(principalFrom(r.Context()), f.Where); err != nil {
		return err
	}
	g, err := s.c.DeadLetterGroupCounts(r.Context(), f, f.Limit)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, g)
}

// DeadLetterView is GET /v1/dlq/{id}: the dead letter with its executions
// and its history (events, oldest first).
type DeadLetterView struct {
	TaskView
	Events []bt.Event `json:"events"`
	// ExecutionsTotal counts all the task's executions; the answer holds
	// the newest ?executions_limit (default 100) of them, oldest first, and
	// ExecutionsNext (null when none are left) goes into
	// ?executions_before for the older ones.
	ExecutionsTotal int     `json:"executions_total"`
	ExecutionsNext  *string `json:"executions_next"`
}

// GET /v1/dlq/{id}: a task that is not dead is not found here.
func (s *Server) getDeadLetter(w http.ResponseWriter, r *http.Request) error {
	v, err := s.taskDetail(r, true)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, v)
}

// PatchRequest is how a replay or redrive changes the payload: Patch is a
// {"path": value} object (applied in the order given) or a list of
// {"path", "value"}; MergePatch is an RFC 7396 merge patch, applied first.
type PatchRequest struct {
	Patch      json.RawMessage `json:"patch,omitempty"`
	MergePatch json.RawMessage `json:"merge_patch,omitempty"`
	// KeepAttempts keeps the attempt counter instead of resetting it.
	KeepAttempts bool `json:"keep_attempts,omitempty"`
	// Delay or RunAt (not both) schedule the replay; default: now.
	Delay bt.Duration `json:"delay,omitempty"`
	RunAt *time.Time  `json:"run_at,omitempty"`
	// HoldKey: on an ordered queue a replayed task always holds its key's
	// later tasks until it settles (docs/ordering.md); true (or absent)
	// says so, false is refused.
	HoldKey *bool `json:"hold_key,omitempty"`
}

func isNull(b json.RawMessage) bool {
	b = bytes.TrimSpace(b)
	return len(b) == 0 || string(b) == "null"
}

// ops reads Patch into path operations, keeping the order of an object's
// keys. It also refuses a run_at that is given but unusable: the zero time
// ("0001-01-01T00:00:00Z") would otherwise read as "not given" (now).
func (p PatchRequest) ops() ([]backstop.PatchOp, error) {
	if p.HoldKey != nil && !*p.HoldKey {
		return nil, &apiError{code: codeInvalidInput, field: "hold_key", detail: "hold_key: false is refused: a replay on an ordered " +
			"queue always holds its key's later tasks until it settles (docs/ordering.md); give true or leave it out"}
	}
	if p.RunAt != nil {
		if err := backstop.CheckTime("run_at", *p.RunAt); err != nil {
			return nil, err
		}
	}
	raw := bytes.TrimSpace(p.Patch)
	if isNull(raw) {
		return nil, nil
	}
	badField := func(detail string) error {
		return &apiError{code: codeInvalidInput, field: "patch", detail: "patch: " + detail}
	}
	var out []backstop.PatchOp
	switch raw[0] {
	case '{':
		dec := json.NewDecoder(bytes.NewReader(raw))
		if _, err := dec.Token(); err != nil {
			return nil, badField(err.Error())
		}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return nil, badField(err.Error())
			}
			path, _ := tok.(string)
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				return nil, badField(err.Error())
			}
			out = append(out, backstop.PatchOp{Path: path, Value: v})
		}
	case '[':
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&out); err != nil {
			return nil, badField("want a list of {\"path\": …, \"value\": …}: " + err.Error())
		}
	default:
		return nil, badField(`want an object {"path": value} or a list of {"path": …, "value": …}`)
	}
	for i, op := range out {
		if op.Path == "" {
			return nil, badField(fmt.Sprintf("operation %d: the path is empty", i))
		}
		if op.Value == nil {
			return nil, badField(fmt.Sprintf("operation %d (%s): give a value (null is a value)", i, op.Path))
		}
	}
	return out, nil
}

func (p PatchRequest) merge() json.RawMessage {
	if isNull(p.MergePatch) {
		return nil
	}
	return p.MergePatch
}

func (p PatchRequest) runAt() time.Time {
	if p.RunAt == nil {
		return time.Time{}
	}
	return *p.RunAt
}

// ReplayRequest is POST /v1/dlq/{id}/replay (an empty body replays as is).
type ReplayRequest struct {
	PatchRequest
	// NewID copies the dead letter under a fresh id instead of replaying
	// it in place; the original is marked replayed.
	NewID bool `json:"new_id,omitempty"`
	// Reopen also replays a discarded or resolved dead letter (undoing a
	// discard or resolve); the history records the status it came from.
	Reopen bool `json:"reopen,omitempty"`
	// Reason: why, recorded with the actor in the history (at most 1 KiB;
	// required when the server's dlq.require_reason is on).
	Reason string `json:"reason,omitempty"`
}

// ReplayResponse reports a replay. Replayed is false (and nothing changed)
// when the task is no longer an open dead letter; State and DLQStatus then
// say what it is.
type ReplayResponse struct {
	Replayed  bool         `json:"replayed"`
	ID        string       `json:"id"`
	NewID     string       `json:"new_id,omitempty"`
	State     bt.State     `json:"state,omitempty"`
	DLQStatus bt.DLQStatus `json:"dlq_status,omitempty"`
	Task      *TaskView    `json:"task,omitempty"`
}

// decodeOptional decodes a body that may be empty.
func decodeOptional(r *http.Request, v any) error {
	b, err := readBody(r)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	return decodeStrict(b, v)
}

// POST /v1/dlq/{id}/replay
func (s *Server) replayDeadLetter(w http.ResponseWriter, r *http.Request) error {
	var req ReplayRequest
	if err := decodeOptional(r, &req); err != nil {
		return err
	}
	ops, err := req.ops()
	if err != nil {
		return err
	}
	p := principalFrom(r.Context())
	res, err := s.c.Replay(r.Context(), backstop.ReplayParams{ID: r.PathValue("id"), Actor: p.Name,
		MergePatch: req.merge(), Patch: ops, KeepAttempts: req.KeepAttempts, Delay: time.Duration(req.Delay),
		RunAt: req.runAt(), NewID: req.NewID, Reopen: req.Reopen, Reason: req.Reason})
	if err != nil {
		return err
	}
	out := ReplayResponse{Replayed: res.Replayed, ID: res.ID, NewID: res.NewID, State: res.State, DLQStatus: res.DLQStatus}
	if res.Task != nil {
		v := view(p, res.Task, false)
		out.Task = &v
	}
	args := []any{"actor", p.Name, "task_id", res.ID}
	if res.Task != nil {
		args = append([]any{"actor", p.Name}, engine.TaskLogAttrs(res.Task)...)
	}
	s.log.Info("dead letter replay", append(args, "replayed", res.Replayed, "new_id", res.NewID)...)
	return writeJSON(w, http.StatusOK, out)
}

// DiscardRequest is POST /v1/dlq/{id}/discard; Reason is required.
type DiscardRequest struct {
	Reason string `json:"reason"`
}

// ResolveRequest is POST /v1/dlq/{id}/resolve; the body is optional.
// Reason is why (as for every operator action); Note, the older field,
// says how it was handled and, without a Reason, counts as one.
type ResolveRequest struct {
	Note   string `json:"note,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// POST /v1/dlq/{id}/discard
func (s *Server) discardDeadLetter(w http.ResponseWriter, r *http.Request) error {
	var req DiscardRequest
	if err := decodeOptional(r, &req); err != nil {
		return err
	}
	p := principalFrom(r.Context())
	t, err := s.c.Discard(r.Context(), backstop.DiscardParams{ID: r.PathValue("id"), Reason: req.Reason, Actor: p.Name})
	if err != nil {
		return err
	}
	s.log.Info("dead letter discarded", "actor", p.Name, "task_id", t.ID)
	return writeJSON(w, http.StatusOK, view(p, t, false))
}

// POST /v1/dlq/{id}/resolve
func (s *Server) resolveDeadLetter(w http.ResponseWriter, r *http.Request) error {
	var req ResolveRequest
	if err := decodeOptional(r, &req); err != nil {
		return err
	}
	p := principalFrom(r.Context())
	t, err := s.c.Resolve(r.Context(), backstop.ResolveParams{ID: r.PathValue("id"), Note: req.Note, Reason: req.Reason, Actor: p.Name})
	if err != nil {
		return err
	}
	s.log.Info("dead letter resolved", "actor", p.Name, "task_id", t.ID)
	return writeJSON(w, http.StatusOK, view(p, t, false))
}

// PurgeRequest is POST /v1/dlq/purge: delete, for good, dead letters whose
// status is one of Statuses (default discarded and resolved) and last
// changed at least OlderThan ago.
type PurgeRequest struct {
	OlderThan bt.Duration    `json:"older_than,omitempty"`
	Statuses  []bt.DLQStatus `json:"statuses,omitempty"`
	// DryRun: count what would be deleted, delete nothing.
	DryRun bool `json:"dry_run,omitempty"`
	// ConfirmOpen must be true when Statuses names "open": open dead
	// letters wait for an operator (400 naming confirm_open without it).
	ConfirmOpen bool `json:"confirm_open,omitempty"`
	// Reason: why; each transaction of a purge that deleted records
	// writes a dlq.purged event (the records' own history goes with them).
	Reason string `json:"reason,omitempty"`
	// Where: only records whose payload and attributes match this CEL
	// condition (docs/api.md); with payloads redacted from the caller's
	// view it may not read a redacted key (raw=true lifts that).
	Where string `json:"where,omitempty"`
	// BelowFloor must be true when OlderThan is below the server's
	// dlq.purge_floor (400 naming purge_floor without it); the dlq.purged
	// event records it.
	BelowFloor bool `json:"below_floor,omitempty"`
}

// PurgeResponse says how many dead letters were deleted or, on a dry run,
// would be.
type PurgeResponse struct {
	Purged     int  `json:"purged"`
	WouldPurge int  `json:"would_purge,omitempty"`
	DryRun     bool `json:"dry_run,omitempty"`
}

// POST /v1/dlq/purge
func (s *Server) purgeDLQ(w http.ResponseWriter, r *http.Request) error {
	var req PurgeRequest
	if err := decodeOptional(r, &req); err != nil {
		return err
	}
	p := principalFrom(r.Context()) // an admin's: its where is not checked against the mask (whereAllowed)
	n, err := s.c.PurgeDLQ(r.Context(), backstop.PurgeParams{OlderThan: time.Duration(req.OlderThan), Statuses: req.Statuses,
		DryRun: req.DryRun, ConfirmOpen: req.ConfirmOpen, Reason: req.Reason, Actor: p.Name, Where: req.Where, BelowFloor: req.BelowFloor})
	if err != nil {
		return err
	}
	if req.DryRun {
		return writeJSON(w, http.StatusOK, PurgeResponse{WouldPurge: n, DryRun: true})
	}
	s.log.Info("dead letters purged", "actor", p.Name, "purged", n, "where", req.Where, "below_floor", req.BelowFloor)
	return writeJSON(w, http.StatusOK, PurgeResponse{Purged: n})
}

// ExportLine is one line of GET /v1/dlq/export: a dead letter with its
// executions and events.
type ExportLine struct {
	*bt.Task
	Executions []bt.Execution `json:"executions"`
	Events     []bt.Event     `json:"events"`
}

// GET /v1/dlq/export: NDJSON, one dead letter per line, in id order; the
// filters of GET /v1/dlq, and limit (default: all).
func (s *Server) exportDLQ(w http.ResponseWriter, r *http.Request) error {
	f, err := ParseDLQQuery(r.URL.Query(), s.now(), 0)
	if err != nil {
		return err
	}
	p := principalFrom(r.Context())
	if err := whereAllowed(p, f.Where); err != nil {
		return err
	}
	rc := http.NewResponseController(w)
	var enc *json.Encoder
	n, err := s.c.ExportDLQ(r.Context(), f, func(d backstop.DeadLetterExport) error {
		if enc == nil {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.Header().Set("X-Content-Type-Options", "nosniff")
			w.WriteHeader(http.StatusOK)
			enc = json.NewEncoder(w)
		}
		v := view(p, d.Task, false)
		if err := enc.Encode(ExportLine{Task: v.Task, Executions: d.Executions, Events: maskEvents(p, d.Events)}); err != nil {
			return err
		}
		_ = rc.Flush()
		return nil
	})
	if err != nil {
		return err
	}
	if enc == nil { // nothing matched: an empty stream
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "")
	}
	s.log.Info("dead letters exported", "actor", p.Name, "exported", n)
	return nil
}

// ReplayPreviewResponse is POST /v1/dlq/{id}/replay/preview: the payload the
// replay would run with (masked as every payload the API shows).
type ReplayPreviewResponse struct {
	ID      string          `json:"id"`
	Payload json.RawMessage `json:"payload"`
}

// POST /v1/dlq/{id}/replay/preview: the replay's patch applied by the
// library's own rules, nothing written (the console's preview).
func (s *Server) previewReplay(w http.ResponseWriter, r *http.Request) error {
	var req ReplayRequest
	if err := decodeOptional(r, &req); err != nil {
		return err
	}
	ops, err := req.ops()
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	payload, err := s.c.PreviewReplay(r.Context(), id, req.merge(), ops)
	if err != nil {
		return err
	}
	p := principalFrom(r.Context())
	return writeJSON(w, http.StatusOK, ReplayPreviewResponse{ID: id, Payload: p.payloadFor(&bt.Task{ID: id, Payload: payload})})
}
