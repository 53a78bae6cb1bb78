-- The dispatcher benchmark's own SQL (`python -m benchmarks.dispatch`; `benchmarks.scale`
-- fills and inspects its big ledgers with the same statements): a big ledger and a drain
-- of WAITING rows. Loaded once by `benchmarks.dispatch` with the product's
-- `teamdesk.tasks.ledger.load_queries` into `SQL` (name → text), in the product's format.
--
-- Parameters are SQLAlchemy's `:name` style: these statements run through `text()` on an
-- engine or a world's sessions.
--
-- The scan being measured is not here: it is the product's own statement `scan`
-- (`teamdesk.tasks.ledger.QUERIES`), run by `teamdesk.tasks.dispatcher.scan` (D1).


-- team --
-- Setup: the team every benchmark row belongs to.
INSERT INTO teams (id, name) VALUES ('acme', 'Acme Support');

-- team_member --
-- Setup: the agent who owns every benchmark row.
INSERT INTO members (team_id, user_id, name, role) VALUES ('acme', 'ben', 'Ben', 'agent');

-- fill --
-- A ledger of :rows rows in one statement. Row g is WAITING for 1 in 40 rows; of those, a
-- third never dispatched, a third checked long ago, a third checked just now (not due for
-- a re-check: read and skipped by the scan). The others are COMPLETED, spread over ~60
-- days of `dispatched_at`, `created_at` and `updated_at`.
INSERT INTO background_tasks (id, type, status, run, attempts, progress, owner_id, team_id,
                              scope, filters, run_at, dispatched_at, created_at, updated_at,
                              result_summary)
SELECT 'B' || lpad(g::text, 9, '0'),
       (CASE WHEN g % 3 = 0 THEN 'REMINDER' ELSE 'EXPORT' END)::task_type,
       (CASE WHEN g % 40 = 0 THEN 'WAITING' ELSE 'COMPLETED' END)::task_status,
       0, 1, CASE WHEN g % 40 = 0 THEN 0 ELSE 100 END, 'ben', 'acme', 'TEAM', '{}'::jsonb,
       now() - make_interval(mins => g % 5000) + make_interval(days => g % 7),
       CASE WHEN g % 40 <> 0 THEN now() - make_interval(mins => g % 90000)
            WHEN g % 120 = 0 THEN NULL
            WHEN g % 120 = 40 THEN now() - make_interval(mins => 5 + g % 600)
            ELSE now() - make_interval(secs => g % 20) END,
       now() - make_interval(mins => g % 90000), now() - make_interval(mins => g % 90000),
       CASE WHEN g % 40 = 0 THEN NULL ELSE '1 ticket' END
FROM generate_series(1, :rows) AS g;

-- vacuum_ledger --
-- After a fill or a mass update: the steady state a live system's autovacuum keeps (no
-- dead index entries, fresh statistics). Runs outside a transaction (autocommit).
VACUUM ANALYZE background_tasks;

-- status_counts --
-- What a fill wrote: rows per status.
SELECT status::text, count(*) FROM background_tasks GROUP BY 1;

-- due_count --
-- What a fill wrote: WAITING rows never dispatched or last checked over 30 s ago (the
-- re-dispatch age), i.e. the rows the scan has to return.
SELECT count(*) FROM background_tasks
 WHERE status = 'WAITING'
   AND (dispatched_at IS NULL OR dispatched_at < now() - interval '30 seconds');

-- ledger_size --
-- What a fill wrote: the ledger's table and indexes, on disk.
SELECT pg_size_pretty(pg_total_relation_size('background_tasks'));

-- mark_all_checked --
-- An idle ledger: every WAITING row checked just now, so nothing is due and a tick is
-- scan + D6 recovery + D7 purge only.
UPDATE background_tasks SET dispatched_at = now() WHERE status = 'WAITING';

-- clear_ledger --
-- Before each drain: an empty ledger.
DELETE FROM background_tasks;

-- waiting_tasks --
-- The drain's input: :n WAITING exports, due a second ago, never dispatched.
INSERT INTO background_tasks (id, type, status, run, owner_id, team_id, scope, filters,
                              run_at)
SELECT 'W' || lpad(g::text, 9, '0'), 'EXPORT', 'WAITING', 0, 'ben', 'acme', 'TEAM', '{}',
       now() - interval '1 second'
FROM generate_series(1, :n) AS g;

-- undispatched_count --
-- After a drain: rows the dispatcher has not marked (D3); must be none.
SELECT count(*) FROM background_tasks WHERE dispatched_at IS NULL;
