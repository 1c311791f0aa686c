-- Autovacuum of backstop_tasks without the cost-based sleep.
--
-- Every claim and settle leaves a dead version of its task row and a dead
-- entry in the claim index; until a vacuum removes them, the next claims
-- of the queue walk them. Migration 00053 starts that vacuum after 10,000
-- dead versions whatever the history; this one makes it short. A vacuum's
-- index pass reads every index of the table in full, the kept history's
-- entries included (about 2 GB of indexes at 15 million finished tasks),
-- and autovacuum by default sleeps 2 ms after every 200 cost units
-- (autovacuum_vacuum_cost_delay, autovacuum_vacuum_cost_limit), which
-- stretches that read to minutes while the claims walk the dead entries.
-- Unthrottled, the vacuum of this one table reads as fast as the server
-- can; the other tables keep the server's throttle.
--
-- An operator's own ALTER TABLE ... SET of this setting after this
-- migration stays; the down migration resets it to the server's default.

-- +goose Up
ALTER TABLE backstop_tasks SET (autovacuum_vacuum_cost_delay = 0);

-- +goose Down
ALTER TABLE backstop_tasks RESET (autovacuum_vacuum_cost_delay);
