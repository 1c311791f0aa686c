package pgstore

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/backstophq/backstop/store"
)

// A batch start's runs (more than one run in a plan's Inserts) are written
// by one statement of arrays, whatever their number, instead of one
// INSERT (one round trip outside a pipeline) per run. A single run keeps
// sqldialect's statement.

// insertRunsSQL inserts the runs of insertRunsArgs' arrays. A run with
// latest is written only while its version is its workflow's latest: else
// its plan hash is NULL, which the NOT NULL column refuses (as
// sqldialect's single insert). strict: a run id that exists fails the
// statement; else it is skipped and the statement returns the ids it
// inserted.
func insertRunsSQL(strict bool) string {
	conflict := " ON CONFLICT (run_id) DO NOTHING RETURNING run_id"
	if strict {
		conflict = ""
	}
	return `INSERT INTO backstop_runs (run_id, workflow, version, plan_hash, state, input, error, seq, created_at, updated_at, finished_at)
	SELECT v.run_id, v.workflow, v.version,
		CASE WHEN NOT v.latest OR v.version = (SELECT max(w.version) FROM backstop_workflows w WHERE w.name = v.workflow) THEN v.plan_hash END,
		v.state, v.input::json, v.error, v.seq, v.created_at, v.updated_at, v.finished_at
	FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::text[], $6::text[], $7::text[], $8::bigint[],
		$9::timestamptz[], $10::timestamptz[], $11::timestamptz[], $12::bool[])
		AS v(run_id, workflow, version, plan_hash, state, input, error, seq, created_at, updated_at, finished_at, latest)` + conflict
}

var (
	sqlInsertRunsStrict = insertRunsSQL(true)
	sqlInsertRuns       = insertRunsSQL(false)
)

// insertRunsArgs are insertRunsSQL's arrays of rs.
func insertRunsArgs(rs []store.RunRecord) []any {
	n := len(rs)
	ids, workflows, hashes, states, errs := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	versions, seqs := make([]int32, n), make([]int64, n)
	inputs := make([]*string, n)
	created, updated, finished := make([]time.Time, n), make([]time.Time, n), make([]*time.Time, n)
	latest := make([]bool, n)
	for i, r := range rs {
		ids[i], workflows[i], versions[i], hashes[i], states[i], errs[i], seqs[i] = r.RunID, r.Workflow, int32(r.Version), r.PlanHash, string(r.State), r.Error, r.Seq
		if len(r.Input) > 0 {
			s := string(r.Input)
			inputs[i] = &s
		}
		created[i], updated[i], finished[i], latest[i] = r.CreatedAt, r.UpdatedAt, r.FinishedAt, r.Latest
	}
	return []any{ids, workflows, versions, hashes, states, inputs, errs, seqs, created, updated, finished, latest}
}

// keyDetail is a unique violation's detail naming the key: Key (run_id)=(…) already exists.
var keyDetail = regexp.MustCompile(`^Key \(run_id\)=\((.*)\) already exists\.$`)

// insertRunsErr is the error of a failed insertRunsSQL: a run id that
// exists is a *store.RunExistsError naming it (the server's detail names
// the key), a run of a superseded version store.ErrStaleVersion.
func insertRunsErr(err error) error {
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe) && pe.Code == "23505":
		if m := keyDetail.FindStringSubmatch(pe.Detail); m != nil {
			return &store.RunExistsError{RunID: m[1]}
		}
		return fmt.Errorf("%w: a run of the batch exists: %v", store.ErrConflict, err)
	case errors.As(err, &pe) && pe.Code == "23502" && pe.ColumnName == "plan_hash":
		return fmt.Errorf("pgstore: insert runs: %w", store.ErrStaleVersion)
	}
	return fmt.Errorf("pgstore: insert runs: %w", permission(err))
}

// insertedAll is the outcome of the non-strict insertRunsSQL: the ids it
// returned. A run it skipped (its id exists) is a *store.RunExistsError
// naming the first such run of rs.
func insertedAll(rs []store.RunRecord, rows pgx.Rows) error {
	got := make(map[string]bool, len(rs))
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return insertRunsErr(err)
		}
		got[id] = true
	}
	rows.Close() // a pipeTx's first statement: its batch's results too
	if err := rows.Err(); err != nil {
		return insertRunsErr(err)
	}
	for _, r := range rs {
		if !got[r.RunID] {
			return &store.RunExistsError{RunID: r.RunID}
		}
	}
	return nil
}

// insertRuns writes rs in tx with one statement (not strict).
func insertRuns(ctx context.Context, tx pgx.Tx, rs []store.RunRecord) error {
	rows, err := tx.Query(ctx, sqlInsertRuns, insertRunsArgs(rs)...)
	if err != nil {
		return insertRunsErr(err)
	}
	return insertedAll(rs, rows)
}
