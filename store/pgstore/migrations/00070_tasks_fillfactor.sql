-- backstop_tasks pages filled to 35 % by inserts: room on its page for the
-- claim's and the settle's new versions of each task row.
--
-- A task row is written three times on the hot path: inserted pending,
-- updated to running by the claim, updated to succeeded by the settle.
-- Neither update can be HOT (the state is in the partial indexes'
-- predicates), but where the new version fits on the old one's page
-- PostgreSQL still writes it there: one buffer instead of two, no heap
-- lock record before the move (XLOG_HEAP_LOCK, 54 bytes, one for each
-- moved version), the new version logged as its difference from the old one
-- (prefix and suffix), and no new pages at the end of the table, where
-- every claim's and settle's moved versions otherwise meet. At the
-- default of 100 % an enqueued page is full, so every claimed and every
-- settled version moves to another page, and a drain of N backlogged
-- tasks appends 2N row versions to the table. At 35 % a page keeps room
-- for two more versions of each row inserted into it (docs/benchmarks.md,
-- "Postgres drain against River, per task"): the WAL of a drained task
-- falls by about 15 %.
--
-- The price is space: inserts stop at 35 % of a page, so pages hold about
-- a third of the rows they did (a backlog's pending rows, and the kept
-- history of finished ones: updates may fill a page, inserts may not, so
-- a page whose tasks have finished stays at about 35 % until retention
-- deletes them). Only pages written after this migration are affected:
-- no table rewrite. An operator's own ALTER TABLE ... SET (fillfactor)
-- after this migration stays; the down migration resets it to the
-- default (100).

-- +goose Up
ALTER TABLE backstop_tasks SET (fillfactor = 35);

-- +goose Down
ALTER TABLE backstop_tasks RESET (fillfactor);
