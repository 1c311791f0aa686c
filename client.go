package backstop

import (
	"context"
	"fmt"
	"slices"
	"time"
	"unicode"
	"unicode/utf8"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/internal/filter"
	"github.com/backstophq/backstop/store"
)

// Client enqueues and inspects tasks. It is safe for concurrent use.
type Client struct {
	e     *engine.Engine
	store store.Store
	cfg   *Config
	// telemetry is the engine's instruments.
	telemetry *engine.Telemetry
	activity  activityCache // queues.go: Activity's closed minutes
}

// NewClient makes a client over s. A nil cfg takes every default.
func NewClient(s store.Store, cfg *Config) (*Client, error) {
	e, err := engine.New(s, cfg)
	if err != nil {
		return nil, err
	}
	return &Client{e: e, store: s, cfg: e.Config(), telemetry: e.Telemetry}, nil
}

// Engine is the engine under the client, for Backstop's own packages (the
// remote worker protocol's server, the maintenance services); its type is
// internal.
func (c *Client) Engine() *engine.Engine { return c.e }

// Store is the store the client works on.
func (c *Client) Store() store.Store { return c.store }

// Config is the client's effective configuration (defaults filled in).
func (c *Client) Config() *Config { return c.cfg }

func convertResults(rs []store.EnqueueResult) []EnqueueResult {
	out := make([]EnqueueResult, len(rs))
	for i, r := range rs {
		out[i] = EnqueueResult{Task: r.Task, Merged: r.Merged, Duplicate: r.Duplicate}
	}
	return out
}

// Enqueue adds one task. Single enqueues made at the same time by
// concurrent callers are written together, one transaction for many (group
// commit); each caller still gets its own result or error, exactly as if
// its task were enqueued alone.
func (c *Client) Enqueue(ctx context.Context, p EnqueueParams) (*EnqueueResult, error) {
	params, spans := c.telemetry.StartSend(ctx, []EnqueueParams{p})
	tasks, err := c.e.PrepareAll(params)
	if err != nil {
		c.telemetry.EndSend(ctx, spans, nil, err)
		return nil, err
	}
	r, err := c.e.EnqueueOne(ctx, tasks[0], c.e.EnqueueOpts(ctx, params, tasks))
	var out []EnqueueResult
	if err == nil {
		out = convertResults([]store.EnqueueResult{r})
		c.e.Enqueued(ctx, tasks)
	}
	c.telemetry.EndSend(ctx, spans, out, err)
	if err != nil {
		return nil, err
	}
	return &out[0], nil
}

// EnqueueMany adds a batch in one transaction: all or nothing.
func (c *Client) EnqueueMany(ctx context.Context, params []EnqueueParams) ([]EnqueueResult, error) {
	if len(params) == 0 {
		return nil, nil
	}
	params, spans := c.telemetry.StartSend(ctx, params)
	tasks, err := c.e.PrepareAll(params)
	if err != nil {
		c.telemetry.EndSend(ctx, spans, nil, err)
		return nil, err
	}
	rs, err := c.store.Enqueue(ctx, tasks, c.e.EnqueueOpts(ctx, params, tasks))
	var out []EnqueueResult
	if err == nil {
		out = convertResults(rs)
		c.e.Enqueued(ctx, tasks)
	}
	c.telemetry.EndSend(ctx, spans, out, err)
	return out, err
}

// EnqueueTx adds tasks inside the caller's transaction — a *sql.Tx, or on
// Postgres also a pgx.Tx — so they exist if and only if it commits: the
// transactional outbox.
func (c *Client) EnqueueTx(ctx context.Context, tx any, params ...EnqueueParams) ([]EnqueueResult, error) {
	if len(params) == 0 {
		return nil, nil
	}
	params, spans := c.telemetry.StartSend(ctx, params)
	tasks, err := c.e.PrepareAll(params)
	if err != nil {
		c.telemetry.EndSend(ctx, spans, nil, err)
		return nil, err
	}
	rs, err := c.store.EnqueueTx(ctx, tx, tasks, c.e.EnqueueOpts(ctx, params, tasks))
	var out []EnqueueResult
	if err == nil {
		out = convertResults(rs)
		c.e.Enqueued(ctx, tasks)
	}
	// Counted when the caller's transaction is handed back: a rollback
	// after this still counts (the library cannot see the commit).
	c.telemetry.EndSend(ctx, spans, out, err)
	return out, err
}

// Get returns a task with its executions.
func (c *Client) Get(ctx context.Context, id string) (*Task, error) {
	t, err := c.store.Get(ctx, id)
	if err == nil {
		err = c.e.WithOrdering(ctx, []*Task{t}) // ordering.go
	}
	if err == nil {
		err = c.e.WithLimitWait(ctx, []*Task{t}) // limits.go
	}
	if err == nil {
		err = c.e.WithDebounce(ctx, []*Task{t}) // debounce.go
	}
	return t, err
}

// ListParams filters a task listing.
type ListParams = store.ListFilter

// List returns tasks matching f, ordered by id, at most f.Limit (default 100,
// at most 10,000).
func (c *Client) List(ctx context.Context, f ListParams) ([]*Task, error) {
	if f.Limit < 0 || f.Limit > 10000 {
		return nil, invalid("limit", "must be between 1 and 10000")
	}
	if err := checkListFilter(f); err != nil {
		return nil, err
	}
	ts, err := c.store.List(c.callBudget(ctx), f)
	return ts, engine.WhereErr(err)
}

// checkListFilter checks a filter's values (but its limit): nothing is
// read on bad input.
func checkListFilter(f ListParams) error {
	for _, s := range f.States {
		if !s.Valid() {
			return invalid("state", "unknown state %q", s)
		}
	}
	if f.Reason != "" && !validReason(f.Reason) {
		return invalid("reason", "unknown dead-letter reason %q", f.Reason)
	}
	for k := range f.Attrs {
		if !engine.ValidAttrKey(k) {
			return invalid("attr", "key %q is not a valid attribute key", k)
		}
	}
	if err := validateDLQFilter(f); err != nil {
		return err
	}
	if err := checkTaskCursor(f.AfterID); err != nil {
		return err
	}
	if err := checkWhere(f.Where, false); err != nil {
		return err
	}
	// A queue or kind that cannot be a name matches nothing; refusing it
	// names the typo (and keeps a NUL byte away from Postgres).
	for _, n := range [...]struct{ field, name string }{{"queue", f.Queue}, {"kind", f.Kind}} {
		if n.name != "" && engine.ValidName(n.name) != nil {
			return invalid(n.field, "%v", engine.ValidName(n.name))
		}
	}
	return nil
}

// checkWhere compiles a where expression (internal/filter); sqlOnly
// refuses one outside the subset the stores evaluate in SQL (for an
// operation that has no Go path; List, counts and redrive evaluate the
// rest in Go: whereInGo).
func checkWhere(w string, sqlOnly bool) error {
	if w == "" {
		return nil
	}
	x, err := filter.Compile(w)
	if err != nil {
		return invalid("where", "%v", err)
	}
	if sqlOnly && !x.InSQL() {
		return invalid("where", "%v: here only comparisons of a payload or attribute path with a literal, in [literals], has() and &&, ||, ! (docs/api.md, filtering by payload)", filter.ErrNotInSQL)
	}
	return nil
}

// whereInGo is a checked where expression's compiled form when the stores
// cannot evaluate it in SQL (nil when there is none or it is in the SQL
// subset): then a count or a bulk operation streams the other filters'
// tasks through Go (filter.Each).
func whereInGo(w string) *filter.Expr {
	if w == "" {
		return nil
	}
	x, err := filter.Compile(w)
	if err != nil || x.InSQL() {
		return nil
	}
	return x
}

// DeadLetterGroups is the dead letters of a filter counted by reason and by
// last error (the largest groups first).
type DeadLetterGroups = store.DLQGroups

// MaxErrorGroups bounds the error groups DeadLetterGroupCounts answers.
const MaxErrorGroups = 1000

// DeadLetterGroupCounts counts the dead letters f selects (as DeadLetters
// does; its AfterID and Limit are ignored) by reason and by last error, at
// most errorLimit errors (default 20, at most MaxErrorGroups), largest
// first. One grouped read per dimension, on the server; a where outside
// the SQL subset is evaluated in Go over the other filters' dead letters,
// read page by page (filter.Each) and counted here, with the same groups.
func (c *Client) DeadLetterGroupCounts(ctx context.Context, f ListParams, errorLimit int) (*DeadLetterGroups, error) {
	if errorLimit < 0 || errorLimit > MaxErrorGroups {
		return nil, invalid("limit", "must be between 1 and %d", MaxErrorGroups)
	}
	if errorLimit == 0 {
		errorLimit = 20
	}
	f.States, f.AfterID, f.Limit = []State{StateDead}, "", 0
	if err := checkListFilter(f); err != nil {
		return nil, err
	}
	if x := whereInGo(f.Where); x != nil {
		g, err := groupsInGo(c.callBudget(ctx), x, f, errorLimit, c.store.List)
		return g, engine.WhereErr(err)
	}
	return c.store.DLQGroups(ctx, f, errorLimit)
}

// errorGroupLen is how much of a last error names its group: its first 200
// characters, as the stores' grouped reads (left / substr) cut it.
const errorGroupLen = 200

// groupsInGo counts by reason and by error the dead letters f selects that
// x matches, streamed (a page of tasks held at a time; one count per
// distinct reason and error group).
func groupsInGo(ctx context.Context, x *filter.Expr, f ListParams, errorLimit int, list func(context.Context, ListParams) ([]*Task, error)) (*DeadLetterGroups, error) {
	byReason, byError := map[string]int{}, map[string]int{}
	g := &DeadLetterGroups{ByReason: []store.GroupCount{}, ByError: []store.GroupCount{}}
	err := filter.Each(ctx, x, f, list, func(t *Task) error {
		g.Total++
		byReason[string(t.DeadReason)]++
		e := t.LastError
		if len(e) > errorGroupLen { // bytes ≥ characters: cut only a long one
			if r := []rune(e); len(r) > errorGroupLen {
				e = string(r[:errorGroupLen])
			}
		}
		byError[e]++
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("dead-letter groups: %w", err)
	}
	for v, n := range byReason {
		g.ByReason = append(g.ByReason, store.GroupCount{Value: v, Count: n})
	}
	for v, n := range byError {
		g.ByError = append(g.ByError, store.GroupCount{Value: v, Count: n})
	}
	store.SortGroups(g.ByReason)
	store.SortGroups(g.ByError)
	g.ByError, g.MoreErrors = store.CapGroups(g.ByError, errorLimit)
	return g, nil
}

func validReason(r bt.DeadReason) bool {
	return slices.Contains(bt.DeadReasons, r)
}

// DeadLetters lists dead letters matching f (its States are ignored).
func (c *Client) DeadLetters(ctx context.Context, f ListParams) ([]*Task, error) {
	f.States = []State{StateDead}
	return c.List(ctx, f)
}

// Cancel cancels a task: at once when it is waiting, cooperatively (within a
// heartbeat) when it is running. A finished task gives ErrConflict.
// With Config.RequireReason it is refused: use CancelTask with a Reason.
func (c *Client) Cancel(ctx context.Context, id string) (*Task, error) {
	return c.CancelTask(ctx, CancelParams{ID: id})
}

func (c *Client) now() time.Time { return c.cfg.Clock.Now() }

// Validate checks params exactly as EnqueueMany would, and writes nothing:
// a dry run for callers that must refuse a whole input before any of it is
// written (the CLI's --batch-file). With several params, the error is a
// *BatchError naming the first bad one.
func (c *Client) Validate(params ...EnqueueParams) error {
	_, err := c.e.PrepareAll(params)
	return err
}

// A listing of tasks, dead letters or workers pages by id: its cursor
// (`after`, the API's next_cursor) is the last id of the previous page, so a
// cursor stays valid when the task it names is deleted. A cursor that no
// page could have handed out is refused, not read as "nothing after it".

// checkTaskCursor: a task cursor is a task id (ValidID), nothing else.
func checkTaskCursor(after string) error {
	if after == "" {
		return nil
	}
	if engine.ValidName(after) != nil {
		return invalid("after", "bad cursor %q: a cursor is the last id of the previous page (1-128 letters, digits, '_', '.', ':' or '-')", after)
	}
	return nil
}

// checkWorkerCursor: a worker id is chosen by its worker, so the cursor is
// only held to what any id can be: valid UTF-8, no control characters (a
// NUL cannot even reach Postgres), at most 255 bytes.
func checkWorkerCursor(after string) error {
	if len(after) > 255 || !utf8.ValidString(after) {
		return invalid("after", "bad cursor %q: a cursor is the last id of the previous page", after)
	}
	for _, r := range after {
		if unicode.IsControl(r) {
			return invalid("after", "bad cursor %q: a cursor is the last id of the previous page", after)
		}
	}
	return nil
}

// A where outside the SQL subset is evaluated in Go under a budget of cost
// and time (Config.WhereCost, Config.WhereTime) tied to the caller's
// context: one per call (a listing, an export, a count, a dry run), one
// per batch of a bulk job (redrive, purge; a close is a batch per call).
// A spent budget stops the evaluation with ErrWhereBudget; a caller that
// goes away stops it too.

// WithWhereBudget returns ctx carrying a fresh where budget (the
// configured one, its time running from now): every call made with it
// shares it, as the calls of one API request do. A call made without one
// gets its own.
func (c *Client) WithWhereBudget(ctx context.Context) context.Context {
	return filter.WithBudget(ctx, c.whereBudget())
}

// whereBudget is the configured budget.
func (c *Client) whereBudget() filter.Budget {
	return filter.Budget{Cost: c.cfg.WhereCost, Time: c.cfg.WhereTime}
}

// callBudget is ctx with a fresh where budget, unless it carries one
// already (a call made within another call shares its budget).
func (c *Client) callBudget(ctx context.Context) context.Context {
	if filter.HasBudget(ctx) {
		return ctx
	}
	return filter.WithBudget(ctx, c.whereBudget())
}

// batchBudget is ctx with a fresh where budget for one batch of a job.
func (c *Client) batchBudget(ctx context.Context) context.Context {
	return c.WithWhereBudget(ctx)
}
