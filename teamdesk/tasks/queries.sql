-- The task path's SQL, in one place (procrastinate's `sql/queries.sql` shape).
--
-- Each statement sits under a `-- name --` header and is loaded once into a name → text
-- registry by `teamdesk.tasks.ledger`. Python refers to a statement by its name only. A
-- section whose name starts with `_` is a fragment: never run alone, written into the
-- statements that say {{_name}}, so one piece of SQL is written once.
-- The texts are fixed (named columns, literals for constant states, lists through
-- `unnest`), so psycopg's automatic preparation pays off: after a few runs each statement
-- is a prepared statement on its connection. Parameters are `%(name)s`.
--
-- Fenced statements (P3) end with the lease condition
--     WHERE id = %(task_id)s AND run = %(run)s AND execution_id = %(execution_id)s
--       AND status = 'RUNNING'
-- and are run only through `ledger.leased_update`, which fills the lease and raises
-- `LeaseLost` unless exactly one row changed.
--
-- Every dispatcher time comparison uses the database's clock, `now()` (D6 made precise):
-- `updated_at` and `dispatched_at` are stamped there, so the cutoff is computed there too.
--
-- Lock order (D8). Several dispatchers' scans overlap (D5), so their multi-row UPDATEs meet
-- the same rows. An UPDATE locks rows in the order its plan reaches them — the heap's
-- order for a sequential scan, which changes as every mark moves row versions, or the
-- array's order — so two such statements could each hold a row the other waits for
-- (`deadlock detected`, a failed tick). Every multi-row UPDATE of the dispatcher
-- (mark_dispatched, fail_from_queue, recover_and_purge) therefore first takes all its
-- row locks in ONE order, by id: a `locked` CTE, `ORDER BY id FOR NO KEY UPDATE` (the
-- lock the UPDATE itself takes, so nothing else is blocked more than before; ORDER BY is
-- applied before the locks, so they are acquired in id order), which the UPDATEs join and
-- whose rows they re-check. Each runs alone in its autocommit transaction. Why that is
-- deadlock-free: a dispatcher statement waits only for task rows and, holding only rows
-- below the one it waits for, can only wait for a holder of higher ids; the claim and the
-- executors' fenced writes are single-row statements (they hold no row while waiting);
-- the reminder's transaction (P10) holds the team lock and ticket rows, which no
-- dispatcher statement ever waits for, and takes its own task row last. So no cycle.


-- claim --
-- P2: claim run `run` with a fresh execution id. The claim does not require an empty lease
-- nor check its age. RETURNING gives the executor the row it needs (no separate load).
UPDATE background_tasks
   SET status = 'RUNNING', execution_id = %(execution_id)s, attempts = %(attempts)s,
       progress = 0
 WHERE id = %(task_id)s AND run = %(run)s AND status IN ('WAITING', 'RUNNING')
RETURNING id, type, run, team_id, owner_id, scope, filters, ticket_id, reminder_revision;

-- task_state --
-- P1: read only when the claim matched nothing, to say why (old run, COMPLETED, FAILED,
-- or no such task).
SELECT run, status FROM background_tasks WHERE id = %(task_id)s;

-- progress --
-- P4 (fenced): a batch's progress, ledger first. Also advances updated_at (D6).
UPDATE background_tasks
   SET progress = %(progress)s
 WHERE id = %(task_id)s AND run = %(run)s AND execution_id = %(execution_id)s
   AND status = 'RUNNING';

-- export_result --
-- P5 (fenced): the export's result, in the same UPDATE that completes it. The 24 h
-- lifetime is counted in the database's clock, like the purge (D7) that ends it.
UPDATE background_tasks
   SET status = 'COMPLETED', progress = 100, result_csv = %(result_csv)s,
       result_summary = %(result_summary)s,
       expires_at = now() + make_interval(secs => %(ttl_s)s), execution_id = NULL
 WHERE id = %(task_id)s AND run = %(run)s AND execution_id = %(execution_id)s
   AND status = 'RUNNING';

-- reminder_completion --
-- P10 (fenced): the reminder's commit gate, run inside the reminder's transaction.
UPDATE background_tasks
   SET status = 'COMPLETED', progress = 100, result_summary = %(result_summary)s,
       execution_id = NULL
 WHERE id = %(task_id)s AND run = %(run)s AND execution_id = %(execution_id)s
   AND status = 'RUNNING';

-- report_retryable --
-- P7 (fenced): an error the queue may retry; the row waits for the next attempt.
UPDATE background_tasks
   SET status = 'WAITING', execution_id = NULL, last_error = %(last_error)s
 WHERE id = %(task_id)s AND run = %(run)s AND execution_id = %(execution_id)s
   AND status = 'RUNNING';

-- report_final --
-- P7 (fenced): a permanent rejection or the last attempt; this run ends FAILED.
UPDATE background_tasks
   SET status = 'FAILED', execution_id = NULL, last_error = %(last_error)s
 WHERE id = %(task_id)s AND run = %(run)s AND execution_id = %(execution_id)s
   AND status = 'RUNNING';

-- export_recheck --
-- X1: authorization again, right before the result is written: the owner's role only
-- (the count was taken once; the rows read are counted in Python).
SELECT role::text AS role FROM members WHERE team_id = %(team_id)s AND user_id = %(owner_id)s;

-- _export_tickets --
-- X1: the team's live tickets that match an export's filters (a NULL filter matches all),
-- with the columns the CSV needs. A fragment (its name starts with `_`): not run on its
-- own, written into export_start, export_batch and export_count where they say
-- {{_export_tickets}}, so the request and the executor cannot drift apart.
SELECT id, title, status::text AS status, priority::text AS priority, creator_id,
       assignee_id, due_at, created_at
  FROM tickets
 WHERE team_id = %(team_id)s AND deleted_at IS NULL
   AND (%(creator_id)s::text IS NULL OR creator_id = %(creator_id)s::text)
   AND (%(statuses)s::text[] IS NULL OR status::text = ANY(%(statuses)s::text[]))
   AND (%(priorities)s::text[] IS NULL OR priority::text = ANY(%(priorities)s::text[]))
   AND (%(created_from)s::timestamptz IS NULL OR created_at >= %(created_from)s::timestamptz)
   AND (%(created_before)s::timestamptz IS NULL OR created_at < %(created_before)s::timestamptz)
   AND (%(title_pattern)s::text IS NULL OR title ILIKE %(title_pattern)s::text ESCAPE '\')
   AND (%(assignee_id)s::text IS NULL OR assignee_id = %(assignee_id)s::text)

-- export_count --
-- X1, R4: how many tickets the filters match now — the request's limit check, run by
-- `services.exports.count_matching` on the executor's own ticket query.
SELECT count(*) AS matching FROM ({{_export_tickets}}) AS matching;

-- export_batch --
-- X1: the next batch of matching tickets after `after_id`, in id order. The subquery is
-- pulled up by the planner: the same plan as the filter written out here.
SELECT * FROM ({{_export_tickets}}) AS matching
 WHERE id > %(after_id)s
 ORDER BY id
 LIMIT %(batch_size)s;

-- export_start --
-- X1, P8: the owner's role, the matching count and the first `export_batch` (after_id
-- 0) in one round trip: one row per ticket of the first batch, each carrying the owner's
-- role and the matching count (one row with NULL ticket columns when nothing matches). The
-- batch is read before the executor checks the role and the limit; a rejected run discards
-- it unused and writes nothing (P8). `matching` is NOT MATERIALIZED: the planner inlines
-- it into both uses, so the count stays a count and the batch stops at its LIMIT.
WITH matching AS NOT MATERIALIZED ({{_export_tickets}})
SELECT a.role, a.matching, b.id, b.title, b.status, b.priority, b.creator_id, b.assignee_id,
       b.due_at, b.created_at
  FROM (SELECT (SELECT role::text FROM members
                 WHERE team_id = %(team_id)s AND user_id = %(owner_id)s) AS role,
               (SELECT count(*) FROM matching) AS matching) AS a
  LEFT JOIN (SELECT * FROM matching ORDER BY id LIMIT %(batch_size)s) AS b ON true
 ORDER BY b.id;

-- team_lock --
-- ch. 26 §5: the team's transaction-scoped advisory lock (released at commit/rollback);
-- the key is `teamdesk.db.locks.team_lock_key(team_id)`, the one the services take too.
SELECT pg_advisory_xact_lock(%(key)s::bigint);

-- reminder_ticket --
-- P10, M1: the ticket as it is now, read under the team lock.
SELECT id, team_id, title, status::text AS status, creator_id, assignee_id, due_at,
       reminder_revision, deleted_at
  FROM tickets WHERE id = %(ticket_id)s;

-- reminder_effects --
-- P10: the notification, the ticket's version bump and the system event, in one round
-- trip, inside the reminder's transaction (the completion UPDATE still follows).
WITH notification AS (
    INSERT INTO notifications (ticket_id, team_id, reminder_revision, recipient_id, message)
    VALUES (%(ticket_id)s, %(team_id)s, %(revision)s, %(recipient_id)s, %(message)s)
), ticket AS (
    UPDATE tickets SET version = version + 1 WHERE id = %(ticket_id)s
)
INSERT INTO ticket_events (ticket_id, team_id, kind, actor_id, data)
VALUES (%(ticket_id)s, %(team_id)s, 'reminder_sent', NULL,
        jsonb_build_object('revision', %(revision)s::int, 'recipient', %(recipient_id)s::text));

-- scan --
-- D1: at most %(limit)s WAITING rows, in two index-bounded halves read in one round trip:
-- first the rows never dispatched, by run_at (partial index
-- ix_background_tasks_undispatched, 0002, which holds exactly these rows), then the rows
-- last checked before now() - the re-dispatch age, in the database's clock, longest-
-- unchecked first (ix_background_tasks_dispatch: the scan starts after the NULLs and
-- stops at the cutoff). UNION ALL is executed child by child (an Append node), so the
-- outer LIMIT stops before the second half when the first fills the batch, and the rows
-- come out in that order. Nothing due costs two index probes; the old single
-- `IS NULL OR <` condition walked every WAITING entry.
SELECT id, run, execution_id, delay_ms
  FROM ((SELECT id, run, execution_id,
                greatest(0, floor(extract(epoch FROM run_at - now()) * 1000))::bigint
                    AS delay_ms
           FROM background_tasks
          WHERE status = 'WAITING' AND dispatched_at IS NULL
          ORDER BY run_at
          LIMIT %(limit)s)
        UNION ALL
        (SELECT id, run, execution_id,
                greatest(0, floor(extract(epoch FROM run_at - now()) * 1000))::bigint
                    AS delay_ms
           FROM background_tasks
          WHERE status = 'WAITING'
            AND dispatched_at < now() - make_interval(secs => %(age_s)s)
          ORDER BY dispatched_at ASC NULLS FIRST, run_at
          LIMIT %(limit)s)) AS due
 LIMIT %(limit)s;

-- mark_dispatched --
-- D3: only after a successful add or refresh, only rows still WAITING in that run.
-- D8: the rows are locked first, in id order (`locked`), and only then updated (see "Lock
-- order" at the top).
WITH locked AS MATERIALIZED (
    SELECT id, run FROM background_tasks
     WHERE (id, run) IN (SELECT * FROM unnest(%(ids)s::text[], %(runs)s::int[]))
       AND status = 'WAITING'
     ORDER BY id
       FOR NO KEY UPDATE
)
UPDATE background_tasks AS t
   SET dispatched_at = now()
  FROM locked
 WHERE t.id = locked.id AND t.run = locked.run AND t.status = 'WAITING';

-- fail_from_queue --
-- D4 failed branch: the queue gave up and no executor holds the row. D8: locked in id
-- order first, like mark_dispatched; run as a statement (a transaction) of its own, never
-- in one transaction with the mark: two sets each locked in id order, one after the
-- other, are not one order.
WITH locked AS MATERIALIZED (
    SELECT id, run FROM background_tasks
     WHERE (id, run) IN (SELECT * FROM unnest(%(ids)s::text[], %(runs)s::int[]))
       AND status = 'WAITING' AND execution_id IS NULL
     ORDER BY id
       FOR NO KEY UPDATE
)
UPDATE background_tasks AS t
   SET status = 'FAILED', last_error = %(last_error)s
  FROM locked
 WHERE t.id = locked.id AND t.run = locked.run
   AND t.status = 'WAITING' AND t.execution_id IS NULL;

-- recover_and_purge --
-- The tick's tail, three disjoint UPDATEs in one round trip (each row is touched by at
-- most one of them: the stall count splits the stale RUNNING rows, and a CSV is only on
-- COMPLETED rows). All cutoffs are in the database's clock.
--   D9: a RUNNING row stale again after two recoveries of the same run ends FAILED
--       (condition RUNNING and still stale, checked by the UPDATE itself);
--   D6: other stale RUNNING rows go back to WAITING, same run, lease and dispatched_at
--       cleared, their per-run recovery count + 1;
--   D7: exports past expires_at lose their CSV; the row and its summary stay.
-- D8: ONE lock set for the whole statement: `locked` takes every candidate row of the
-- three UPDATEs in id order (a bitmap OR of the two partial indexes), then each UPDATE
-- filters on it and re-checks its own condition. Three UPDATEs each locking as their plan
-- met the rows would be three orders in one transaction.
WITH locked AS MATERIALIZED (
    SELECT id FROM background_tasks
     WHERE (status = 'RUNNING' AND updated_at < now() - make_interval(secs => %(age_s)s))
        OR (type = 'EXPORT' AND result_csv IS NOT NULL AND expires_at < now())
     ORDER BY id
       FOR NO KEY UPDATE
), failed_stalled AS (
    UPDATE background_tasks AS t
       SET status = 'FAILED', execution_id = NULL, last_error = %(stalled_error)s,
           stale_recoveries = t.stale_recoveries + 1
      FROM locked
     WHERE t.id = locked.id
       AND t.status = 'RUNNING' AND t.updated_at < now() - make_interval(secs => %(age_s)s)
       AND t.stale_recoveries >= %(max_recoveries)s
    RETURNING 1
), recovered AS (
    UPDATE background_tasks AS t
       SET status = 'WAITING', execution_id = NULL, dispatched_at = NULL,
           stale_recoveries = t.stale_recoveries + 1
      FROM locked
     WHERE t.id = locked.id
       AND t.status = 'RUNNING' AND t.updated_at < now() - make_interval(secs => %(age_s)s)
       AND t.stale_recoveries < %(max_recoveries)s
    RETURNING 1
), purged AS (
    UPDATE background_tasks AS t
       SET result_csv = NULL
      FROM locked
     WHERE t.id = locked.id
       AND t.type = 'EXPORT' AND t.result_csv IS NOT NULL AND t.expires_at < now()
    RETURNING 1
)
SELECT (SELECT count(*) FROM failed_stalled) AS failed_stalled,
       (SELECT count(*) FROM recovered) AS recovered_stale,
       (SELECT count(*) FROM purged) AS purged;

-- catch_up_lock --
-- D8, D5: one catch-up at a time across processes. A dispatcher that wants to go on after
-- a full scan takes this session-level advisory lock for the round (never waiting: a try),
-- so two worker processes woken by the same burst do not both work through the same rows
-- round after round. Not a row lock: no claim (P2) ever waits for it.
SELECT pg_try_advisory_lock(hashtext('teamdesk.dispatch.catch_up')) AS got;

-- catch_up_unlock --
-- D8: the end of a catch-up round (a broken connection ends its session and the lock).
SELECT pg_advisory_unlock(hashtext('teamdesk.dispatch.catch_up')) AS released;
