package execworker_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/execworker"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store/sqlitestore"
)

// TestResultFile: the program's JSON in $BACKSTOP_RESULT_FILE is the
// attempt's result; none or an empty file is none; a file that is not JSON,
// holds what PostgreSQL's jsonb cannot (checked as every result is), is
// too large or not a regular file fails the attempt permanently, naming
// the problem; the file lives in a private directory removed afterwards;
// an inherited BACKSTOP_RESULT_FILE is not passed on.
func TestResultFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	seen := filepath.Join(dir, "seen")
	big := filepath.Join(dir, "big.json")
	if err := os.WriteFile(big, []byte(`"`+strings.Repeat("x", backstop.MaxResultBytes)+`"`), 0o600); err != nil {
		t.Fatal(err)
	}
	unholdable := filepath.Join(dir, "unholdable.json")
	if err := os.WriteFile(unholdable, []byte(`{"a":["\udc00"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, script, want, wantErr string
	}{
		{name: "object", script: `printf '{"n": 1}\n' > "$BACKSTOP_RESULT_FILE"`, want: `{"n": 1}`},
		{name: "none", script: `true`},
		{name: "empty", script: `: > "$BACKSTOP_RESULT_FILE"`},
		{name: "not JSON", script: `echo '{"n":' > "$BACKSTOP_RESULT_FILE"`, wantErr: "is not valid JSON"},
		{name: "not for jsonb", script: `cp ` + unholdable + ` "$BACKSTOP_RESULT_FILE"`, wantErr: "result.a[0] holds \\udc00"},
		{name: "too large", script: `cp ` + big + ` "$BACKSTOP_RESULT_FILE"`, wantErr: "at most 1048576"},
		{name: "not a file", script: `mkdir "$BACKSTOP_RESULT_FILE"`, wantErr: "not a regular file"},
		{name: "symlink", script: `ln -s /etc/passwd "$BACKSTOP_RESULT_FILE"`, wantErr: "cannot be read"},
		{name: "fifo", script: `mkfifo "$BACKSTOP_RESULT_FILE"`, wantErr: "not a regular file"},
		{name: "failed run", script: `echo 1 > "$BACKSTOP_RESULT_FILE"; (exit 3)`, wantErr: "exited with code 3"},
	} {
		h := newHandler(t, execworker.Config{Command: shell(tc.script + `; s=$?; echo "$BACKSTOP_RESULT_FILE" > ` + seen + `; exit $s`),
			Env: []string{"PATH=" + os.Getenv("PATH"), execworker.ResultFileEnv + "=/inherited"}})
		r := h.Run(context.Background(), testTask())
		if string(r.Value) != tc.want {
			t.Errorf("%s: result %q, want %q", tc.name, r.Value, tc.want)
		}
		switch {
		case tc.wantErr == "" && r.Err != nil:
			t.Errorf("%s: %v", tc.name, r.Err)
		case tc.wantErr != "" && (r.Err == nil || !strings.Contains(r.Err.Error(), tc.wantErr)):
			t.Errorf("%s: error %v, want one with %q", tc.name, r.Err, tc.wantErr)
		case tc.wantErr != "" && tc.name != "failed run" &&
			(!backstop.IsPermanent(r.Err) || !strings.Contains(r.Err.Error(), execworker.ResultFileEnv)):
			t.Errorf("%s: error %v, want a permanent one naming %s", tc.name, r.Err, execworker.ResultFileEnv)
		}
		b, err := os.ReadFile(seen)
		if err != nil {
			t.Fatal(err)
		}
		path := strings.TrimSpace(string(b))
		if path == "/inherited" || !strings.HasSuffix(path, "result.json") {
			t.Errorf("%s: BACKSTOP_RESULT_FILE=%q, want a fresh file", tc.name, path)
		}
		if _, err := os.Lstat(path); !os.IsNotExist(err) {
			t.Errorf("%s: the result file %s outlived the run (%v)", tc.name, path, err)
		}
		if fi, err := os.Stat(filepath.Dir(path)); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: the result directory %s: %v, want a private one (0700)", tc.name, filepath.Dir(path), err)
		}
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Dir(path)); !os.IsNotExist(err) {
			t.Errorf("%s: the result directory %s outlived the handler's Close (%v)", tc.name, filepath.Dir(path), err)
		}
	}
}

// TestResultFilesFreshPerRun: the runs of one handler name fresh result
// and progress files in one private directory, each removed after its
// run; a directory removed under the handler is made again.
func TestResultFilesFreshPerRun(t *testing.T) {
	t.Parallel()
	seen := filepath.Join(t.TempDir(), "seen")
	h := newHandler(t, execworker.Config{Command: shell(`echo "$BACKSTOP_RESULT_FILE $BACKSTOP_PROGRESS_FILE" >> ` + seen +
		`; echo '"r"' > "$BACKSTOP_RESULT_FILE"; echo 1/2 > "$BACKSTOP_PROGRESS_FILE"`)})
	defer h.Close()
	for i := range 3 {
		if r := h.Run(context.Background(), testTask()); r.Err != nil || string(r.Value) != `"r"` {
			t.Fatalf("run %d: %+v", i, r)
		}
		if i == 1 {
			b, _ := os.ReadFile(seen)
			if err := os.RemoveAll(filepath.Dir(strings.Fields(string(b))[0])); err != nil {
				t.Fatal(err)
			}
		}
	}
	b, err := os.ReadFile(seen)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	dirs := map[string]bool{}
	for _, p := range strings.Fields(string(b)) {
		if names[p] {
			t.Errorf("%s named twice", p)
		}
		names[p] = true
		dirs[filepath.Dir(p)] = true
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s outlived its run (%v)", p, err)
		}
	}
	if len(names) != 6 || len(dirs) != 1 {
		t.Errorf("names %v in directories %v, want 6 names in one directory", names, dirs)
	}
}

// TestResultFileWithWorker: in a worker the result file's JSON is the
// success settlement's result, and a bad file dead-letters the task at
// once (permanent) with the problem as its error. The store is a REAL
// SQLite file under testdb.SettleRecorder (drivers do not write results:
// the settle seam is where they are seen).
func TestResultFileWithWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := sqlitestore.Open(strings.TrimPrefix(testdb.SQLite(t), "sqlite://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	rec := testdb.RecordSettlements(s)
	c, err := backstop.NewClient(rec, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := newHandler(t, execworker.Config{
		Command: shell(`if [ "$BACKSTOP_KIND" = good ]; then echo '["ok", 2]' > "$BACKSTOP_RESULT_FILE"; else echo nope > "$BACKSTOP_RESULT_FILE"; fi`),
	})
	w, err := backstop.NewWorker(c, &backstop.WorkerConfig{Queues: map[string]int{"q": 2}, Lease: 5 * time.Second,
		PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	w.HandleDefault(h)
	res, err := c.EnqueueMany(ctx, []backstop.EnqueueParams{{Queue: "q", Kind: "good"}, {Queue: "q", Kind: "bad", MaxAttempts: 5}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stop, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		w.Stop(stop)
	}()
	good, bad := res[0].Task.ID, res[1].Task.ID
	testwait.For(t, "both settlements", func() bool { return len(rec.Of(good)) > 0 && len(rec.Of(bad)) > 0 })
	if g := rec.Of(good); g[0].Outcome != bt.OutcomeSucceeded || string(g[0].Result) != `["ok", 2]` {
		t.Errorf("good: %+v, want a success with the file's JSON", g[0])
	}
	bs := rec.Of(bad)
	if bs[0].State != bt.StateDead || bs[0].DeadReason != bt.ReasonPermanentError || bs[0].Result != nil ||
		!strings.Contains(bs[0].Error, execworker.ResultFileEnv) || !strings.Contains(bs[0].Error, "not valid JSON") {
		t.Errorf("bad: %+v, want dead at once (permanent) naming the result file's problem", bs[0])
	}
}
