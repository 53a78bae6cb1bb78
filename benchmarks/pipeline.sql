-- The pipeline benchmark's own SQL (`python -m benchmarks.pipeline` and its measurement
-- modules; `benchmarks.scale`'s memory run sets up the same world): the world it writes
-- and what it polls. Loaded once by `benchmarks._world` with the product's
-- `teamdesk.tasks.ledger.load_queries` into `SQL` (name → text), in the product's format.
--
-- Parameters are SQLAlchemy's `:name` style: these statements run through `text()` on a
-- world's sessions. The two without parameters (`task_ids`, `ping`) also run on raw
-- psycopg connections, where the style would be `%(name)s`.
--
-- Nothing here re-spells a statement the product runs: the ledger bound runs the claim and
-- the fenced writes from `teamdesk.tasks.ledger.QUERIES` (P2, P3).


-- reminder_tickets --
-- Setup: team `ops` gets one ticket per reminder task, due a minute ago, current
-- reminder revision 1 (M1), so every reminder sends its notification.
INSERT INTO tickets (team_id, title, creator_id, assignee_id, due_at, version,
                     reminder_revision)
SELECT 'ops', 'Bench reminder ' || g, 'dan', 'ben', now() - interval '1 minute', 1, 1
FROM generate_series(1, :n) AS g;

-- analyze --
-- Setup: fresh planner statistics after the seed, so the first tasks get the plans a
-- live ledger would.
ANALYZE;

-- outbox_tasks --
-- The outbox insert (O1): tasks number :first … :first + :n - 1, types alternating, as the
-- services would write them: WAITING, run 0, never dispatched. Exports: TEAM scope by an
-- agent, a text filter that matches exactly one seeded `acme` ticket. Reminders: task g
-- takes the g/2-th `ops` ticket, current revision. With :kind ('EXPORT' or 'REMINDER'),
-- only the tasks of that type among them.
WITH rt AS (SELECT id, creator_id, reminder_revision,
                   row_number() OVER (ORDER BY id) AS rn
            FROM tickets WHERE team_id = 'ops')
INSERT INTO background_tasks (type, status, run, owner_id, team_id, ticket_id,
                              reminder_revision, scope, filters, run_at)
SELECT CASE WHEN g % 2 = 0 THEN 'REMINDER'::task_type ELSE 'EXPORT'::task_type END,
       'WAITING', 0,
       CASE WHEN g % 2 = 0 THEN rt.creator_id ELSE 'ben' END,
       CASE WHEN g % 2 = 0 THEN 'ops' ELSE 'acme' END,
       rt.id, rt.reminder_revision,
       CASE WHEN g % 2 = 0 THEN 'OWN'::task_scope ELSE 'TEAM'::task_scope END,
       CASE WHEN g % 2 = 0 THEN '{}'::jsonb
            ELSE jsonb_build_object('text', '#' || (g % 300 + 1) || ')') END,
       now() - interval '1 minute'
FROM generate_series(:first, :first + :n - 1) AS g
LEFT JOIN rt ON g % 2 = 0 AND rt.rn = g / 2
WHERE CAST(:kind AS text) IS NULL
   OR CAST(:kind AS text) = CASE WHEN g % 2 = 0 THEN 'REMINDER' ELSE 'EXPORT' END;

-- ledger_counts --
-- Polled while a run drains: (COMPLETED, FAILED, all rows) of the ledger.
SELECT count(*) FILTER (WHERE status = 'COMPLETED'), count(*) FILTER (WHERE status = 'FAILED'),
       count(*) FROM background_tasks;

-- notifications --
-- After a pipeline run: one notification per reminder, or a reminder went wrong (P10).
SELECT count(*) FROM notifications;

-- in_queue --
-- Polled by the backlog scenario: (rows in the queue, COMPLETED, FAILED). A row is in the
-- queue once D3 marked it `dispatched_at`, or once a worker took it (no longer WAITING).
SELECT count(*) FILTER (WHERE dispatched_at IS NOT NULL OR status <> 'WAITING'),
       count(*) FILTER (WHERE status = 'COMPLETED'), count(*) FILTER (WHERE status = 'FAILED')
  FROM background_tasks;

-- task_ids --
-- The ledger bound's setup, before its clock starts: every task's id, in one order all
-- its processes agree on (each takes its share by position).
SELECT id FROM background_tasks ORDER BY id;

-- ping --
-- The call costs' floor: one pool checkout and the cheapest round trip.
SELECT 1;
