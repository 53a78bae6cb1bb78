-- The harness's SQL, beside the product's `teamdesk/tasks/queries.sql` and in its form:
-- the book's old statements (the counterexamples a lab switches on), the counterfactuals a
-- notebook compares with the product's, and the lab's own reads. Loaded by the product's
-- `load_queries(path)` into `labs.statements.LAB_QUERIES`; psycopg's `%(name)s`
-- parameters, whatever runs them (a psycopg connection, or a session's connection through
-- `labs.statements.run`).

-- ================================================================ the book's old writes

-- legacy_failed --
-- The retired `failed` listener (ch. 26 §7, W2 broken on purpose): FAILED by task id +
-- run, no lease, the error's own text (`labs.counterexample_worker`).
UPDATE background_tasks SET status = 'FAILED', execution_id = NULL,
       last_error = %(last_error)s
 WHERE id = %(task_id)s AND run = %(run)s AND status <> 'COMPLETED';

-- leaseless_progress --
-- The export's progress before the lease: by task id + run, whatever the status (P3
-- broken on purpose). The same SET list as the product's `progress`.
UPDATE background_tasks SET progress = %(progress)s
 WHERE id = %(task_id)s AND run = %(run)s;

-- leaseless_export_result --
-- The export's result before the lease (P3, P5 broken on purpose): an old execution's CSV
-- lands over a newer lease or result. The same SET list as the product's `export_result`.
UPDATE background_tasks SET status = 'COMPLETED', progress = 100,
       result_csv = %(result_csv)s, result_summary = %(result_summary)s,
       expires_at = now() + make_interval(secs => %(ttl_s)s), execution_id = NULL
 WHERE id = %(task_id)s AND run = %(run)s;

-- old_notification --
-- The book's old reminder effects (ch. 26 §5), one statement each. The notification's
-- unique constraint (ticket, revision, recipient) skips a duplicate instead of failing the
-- transaction — so the event and the version bump after it still go up (P10 broken).
INSERT INTO notifications (ticket_id, team_id, reminder_revision, recipient_id, message)
VALUES (%(ticket_id)s, %(team_id)s, %(revision)s, %(recipient_id)s, %(message)s)
ON CONFLICT DO NOTHING;

-- old_event --
INSERT INTO ticket_events (ticket_id, team_id, kind, actor_id, data)
VALUES (%(ticket_id)s, %(team_id)s, 'reminder_sent', NULL,
        jsonb_build_object('revision', %(revision)s::int, 'recipient', %(recipient_id)s::text));

-- old_version --
UPDATE tickets SET version = version + 1 WHERE id = %(ticket_id)s;

-- run_holder --
-- The status-only guard: whoever holds the run now, the same rows a `WHERE id AND run
-- AND status = 'RUNNING'` UPDATE would change (P3 broken on purpose).
SELECT execution_id FROM background_tasks
 WHERE id = %(task_id)s AND run = %(run)s AND status = 'RUNNING';

-- ================================================================ counterfactuals

-- scan_without_nulls_first --
-- The D1 scan ordered `dispatched_at ASC` without `NULLS FIRST`: PostgreSQL sorts NULL
-- last in an ascending order, so never-dispatched rows queue behind every row due for a
-- re-check (notebook 23's fairness argument).
SELECT id FROM background_tasks
 WHERE status = 'WAITING'
   AND (dispatched_at IS NULL OR dispatched_at < now() - make_interval(secs => %(age_s)s))
 ORDER BY dispatched_at ASC, run_at ASC, id
 LIMIT %(limit)s;

-- waiting_seconds_earlier --
-- Every WAITING row's clocks moved `later_s` back, in a transaction that is rolled back:
-- the product's own `scan` then sees what it would see `later_s` from now (notebook 23's
-- preview; the dispatcher compares in the database's clock, which cannot be moved).
UPDATE background_tasks
   SET dispatched_at = dispatched_at - make_interval(secs => %(later_s)s),
       run_at = run_at - make_interval(secs => %(later_s)s)
 WHERE status = 'WAITING';

-- ================================================================ the lab's reads

-- lease_of --
SELECT status::text, execution_id FROM background_tasks WHERE id = %(id)s;

-- status_counts --
SELECT status::text, count(*) FROM background_tasks GROUP BY 1;

-- task_count --
SELECT count(*) FROM background_tasks;

-- task_clock --
-- Notebook 30: a task's status, lease, attempts and dispatch mark.
SELECT status, execution_id, attempts, dispatched_at FROM background_tasks WHERE id = %(id)s;

-- idle_seconds --
-- How long a task's `updated_at` has not moved, in the database's clock (D6's).
SELECT extract(epoch FROM now() - updated_at) FROM background_tasks WHERE id = %(id)s;

-- reminder_notifications --
-- The chaos checker's reminder facts (P10): notifications per ticket and revision ...
SELECT ticket_id, reminder_revision, count(*) FROM notifications
 WHERE team_id = %(team)s GROUP BY 1, 2;

-- reminder_events --
-- ... and every event of the team's tickets.
SELECT ticket_id, kind, data FROM ticket_events WHERE team_id = %(team)s;

-- databases_left --
-- Which of these databases still exist (notebook 27's judge of a fixture's clean-up).
SELECT datname FROM pg_database WHERE datname = ANY(%(names)s);

-- team_lock_holders --
-- The team lock's holders: an advisory lock with one bigint key (objsubid 1), shown by
-- `pg_locks` as its high (classid) and low (objid) 32 bits — `team_lock_key_parts`.
SELECT a.pid, a.state, a.application_name,
       round(extract(epoch FROM clock_timestamp() - a.xact_start)::numeric, 1) AS in_tx_s,
       left(regexp_replace(a.query, '\s+', ' ', 'g'), 70) AS last_query
  FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND l.classid::bigint = %(hi)s AND l.objid::bigint = %(lo)s;

-- row_lock_waits --
-- Who waits on a lock in an UPDATE of the ledger, and who blocks it (ch. 26 §5, P12: a
-- claim waiting on the row lock of a completion that has not committed yet).
SELECT b.state AS blocker_state, left(b.query, 60) AS blocker_query,
       (SELECT array_agg(l.locktype::text) FROM pg_locks l
         WHERE l.pid = w.pid AND NOT l.granted) AS waiting_for
  FROM pg_stat_activity w
 CROSS JOIN LATERAL unnest(pg_blocking_pids(w.pid)) AS bp(pid)
  JOIN pg_stat_activity b ON b.pid = bp.pid
 WHERE w.datname = current_database() AND w.wait_event_type = 'Lock'
   AND w.query ILIKE %(waiting_query)s;

-- server_room --
-- The server and its room for a class (`teamdesk preflight`): version, connection limit,
-- the connections kept for superusers, and the client connections open now.
SELECT current_setting('server_version') AS version,
       current_setting('server_version_num')::int AS version_num,
       current_setting('max_connections')::int AS max_connections,
       current_setting('superuser_reserved_connections')::int AS reserved,
       (SELECT count(*) FROM pg_stat_activity
         WHERE backend_type = 'client backend') AS in_use;
