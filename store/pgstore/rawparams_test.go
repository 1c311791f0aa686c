package pgstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/testdb"
)

// rawPool is a pool on a fresh database (no schema needed).
func rawPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// sqlRawEcho takes one parameter of each type rawParams encodes and
// returns them as text.
const sqlRawEcho = `SELECT concat_ws(' | ', $1::timestamptz::text, $2::timestamptz[]::text, $3::text[]::text, $4::text[]::text,
	$5::text[]::text, $6::bigint[]::text, $7::json::text, $8::text, $9::json::text)`

// The parameters rawParams writes read back as the server reads pgx's
// encoding of the same values: odd text (UTF-8, quotes, backslashes,
// braces, commas, the empty string, NULL as a word), times with
// nanoseconds, in other zones, before 2000 and far ahead, large arrays and
// empty ones, int8's extremes, a NULL json.
func TestRawParamsRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := rawPool(t, testdb.Postgres(t))
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	sd, err := conn.Conn().Prepare(ctx, sqlRawEcho, sqlRawEcho)
	if err != nil {
		t.Fatal(err)
	}
	odd := []string{"", "NULL", "null", `"quoted"`, `back\slash`, "{braces}", "a,b", " spaced ", "ünïcödé 😀", "tab\tnew\nline", strings.Repeat("long-", 2000)}
	zones := []*time.Location{time.UTC, time.FixedZone("x", -5*3600-1800), time.FixedZone("y", 14*3600)}
	var batch []row
	for i := range 2500 {
		at := time.Date(1970+i%90, time.Month(1+i%12), 1+i%28, i%24, i%60, i%60, i*7919%1_000_000_000, zones[i%len(zones)])
		if i%500 == 0 {
			at = time.Date(1999, 12, 31, 23, 59, 59, 999_999_999, time.UTC) // just before the timestamps' zero
		}
		tk := &bt.Task{ID: fmt.Sprintf("id-%d-%s", i, odd[i%len(odd)]), Queue: odd[(i+3)%len(odd)], Kind: "kïnd", CreatedAt: at}
		batch = append(batch, row{task: tk})
	}
	for _, c := range []struct {
		name  string
		batch []row
		extra []string
		ns    []int64
		json  []byte
	}{
		{"large", batch, odd, []int64{math.MinInt64, -1, 0, 1, math.MaxInt64}, []byte(`{"a": ["ü", 1.5e300, null]}`)},
		{"one", batch[7:8], []string{""}, []int64{0}, nil},
		{"empty arrays", batch[:0], []string{}, []int64{}, []byte(`[]`)},
	} {
		at := time.Date(2026, 11, 28, 2, 3, 4, 123456789, zones[1])
		args := []any{at, eventTimes(c.batch), eventTexts{c.batch, taskID}, eventTexts{c.batch, taskQueue}, c.extra, c.ns, c.json, "actor ü", []byte(`{"x": "y"}`)}
		var want string
		if err := conn.QueryRow(ctx, sqlRawEcho, at, createdTimes(eventTimes(c.batch)), ids(eventTexts{c.batch, taskID}), ids(eventTexts{c.batch, taskQueue}), c.extra, c.ns, c.json, "actor ü", []byte(`{"x": "y"}`)).Scan(&want); err != nil {
			t.Fatal(err)
		}
		_, values, ok := rawParams(nil, sd.ParamOIDs, args)
		if !ok {
			t.Fatalf("%s: rawParams refused the arguments (parameter types %v)", c.name, sd.ParamOIDs)
		}
		res := conn.Conn().PgConn().ExecStatement(ctx, sd, values, binaryFormat, nil).Read()
		if res.Err != nil {
			t.Fatalf("%s: %v", c.name, res.Err)
		}
		if got := string(res.Rows[0][0]); got != want {
			t.Errorf("%s: the server read\n%.600s\npgx's encoding reads\n%.600s", c.name, got, want)
		}
	}
	if got, want := fmt.Sprint(eventTexts{batch[:2], taskQueue}), fmt.Sprint([]string{batch[0].task.Queue, batch[1].task.Queue}); got != want {
		t.Errorf("an array prints as %s, want %s", got, want)
	}
	// A value of another type than its parameter's is refused, not sent.
	for _, args := range [][]any{
		{time.Now(), eventTimes(nil), eventTexts{nil, taskID}, eventTexts{nil, taskID}, []string{}, []int64{}, nil, "a", 42},
		{time.Now(), eventTimes(nil), eventTexts{nil, taskID}, eventTexts{nil, taskID}, []string{}, []int64{}, nil, []byte("a"), []byte("{}")},
		{time.Now()},
	} {
		if _, _, ok := rawParams(nil, sd.ParamOIDs, args); ok {
			t.Errorf("rawParams took %v", args)
		}
	}
}

// firstWaking goes through pgconn's pipeline (firstRaw) on a connection
// that keeps statements prepared, and through pgx's batch otherwise; a
// statement that fails in the pipeline is its error, and the transaction
// rolls back leaving the connection usable.
func TestFirstRaw(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := testdb.Postgres(t)
	const sql = `SELECT (100 / ($1::bigint[])[1])::int8`
	try := func(pool *pgxpool.Pool, n int64) (sent bool, seq int64, err error) {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		tx := &pipeTx{conn: conn.Conn()}
		sent, err = tx.firstRaw(ctx, []string{"q-ü"}, &seq, sql, []any{[]int64{n}})
		if rbErr := tx.Rollback(context.WithoutCancel(ctx)); rbErr != nil {
			t.Fatal(rbErr)
		}
		if st := conn.Conn().PgConn().TxStatus(); st != 'I' {
			t.Fatalf("after the rollback the connection is in state %c", st)
		}
		var one int
		if qErr := conn.QueryRow(ctx, "SELECT 1").Scan(&one); qErr != nil || one != 1 {
			t.Fatalf("the connection after firstRaw: %v", qErr)
		}
		return sent, seq, err
	}
	pool := rawPool(t, url)
	if sent, seq, err := try(pool, 4); !sent || err != nil || seq != 25 {
		t.Fatalf("firstRaw: sent %v, %d, %v; want sent, 25", sent, seq, err)
	}
	var pe *pgconn.PgError
	if sent, _, err := try(pool, 0); !sent || !errors.As(err, &pe) || pe.Code != "22012" {
		t.Fatalf("firstRaw of a division by zero: sent %v, %v; want sent, the division's error", sent, err)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	unprepared, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer unprepared.Close()
	if sent, _, err := try(unprepared, 4); sent || err != nil {
		t.Fatalf("firstRaw on a connection that prepares nothing: sent %v, %v; want not sent", sent, err)
	}
	// The same through firstWaking: pgx's batch.
	conn, err := unprepared.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	tx := &pipeTx{conn: conn.Conn()}
	var seq int64
	if err := tx.firstWaking(ctx, []string{"q"}, &seq, sql, []int64{5}); err != nil || seq != 20 {
		t.Fatalf("firstWaking through pgx's batch: %d, %v; want 20", seq, err)
	}
	_ = tx.Rollback(ctx)
}

// rawParams writes what pgx's type map writes for the same values in the
// binary format, byte for byte.
func FuzzRawParamsMatchPgx(f *testing.F) {
	f.Add("id", "queue", int64(0), int64(0), 3, int64(7), []byte(`{}`))
	f.Add("", "ü\x00\"{,}\\", int64(-62135596800), int64(999_999_999), 0, int64(math.MinInt64), []byte(nil))
	f.Add("😀", "NULL", int64(253402300799), int64(1), 1000, int64(math.MaxInt64), []byte(`[1, "a"]`))
	m := pgtype.NewMap()
	oids := []uint32{oidTimestamptz, oidTimestamptzArr, oidTextArray, oidTextArray, oidTextArray, oidInt8Array, oidJSON, oidText}
	f.Fuzz(func(t *testing.T, a, b string, sec, nsec int64, n int, i int64, js []byte) {
		n = min(max(n, 0), 2000)
		at := time.Unix(sec, nsec).In(time.FixedZone("z", int(i%50000)))
		batch := make([]row, n)
		strs := make([]string, n)
		for k := range batch {
			s := a
			if k%2 == 1 {
				s = b
			}
			batch[k] = row{task: &bt.Task{ID: s, Queue: b, CreatedAt: at.Add(time.Duration(k) * 1001 * time.Nanosecond)}}
			strs[k] = s
		}
		_, got, ok := rawParams(nil, oids, []any{at, eventTimes(batch), eventTexts{batch, taskID}, eventTexts{batch, taskQueue}, strs, []int64{i, -i, int64(n)}, js, a})
		if !ok {
			t.Fatal("rawParams refused")
		}
		for k, v := range []any{at, createdTimes(eventTimes(batch)), ids(eventTexts{batch, taskID}), ids(eventTexts{batch, taskQueue}), strs, []int64{i, -i, int64(n)}, js, a} {
			want, err := m.Encode(oids[k], pgtype.BinaryFormatCode, v, make([]byte, 0, 8)) // as pgx encodes parameters: never into nil
			if err != nil {
				t.Skip(err) // a value pgx refuses (a time out of timestamptz's range)
			}
			if !bytes.Equal(got[k], want) || (got[k] == nil) != (want == nil) {
				t.Fatalf("parameter %d (%T):\nrawParams %x\npgx       %x", k+1, v, got[k], want)
			}
		}
	})
}
