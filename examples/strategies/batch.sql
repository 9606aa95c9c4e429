-- inboxbench strategy file: many events in one transaction, as the
-- built-in batch strategy applies them, written as set-based SQL a team
-- could run in production.
--
-- description: N events per transaction: accounts locked in id order, inbox keys claimed with one INSERT … ON CONFLICT, every account updated once
-- outcome: batch
--
-- Every event parameter is an array over the batch (delivery order);
-- :ordinal numbers the events 1..n. The last statement returns one row
-- per event, with its ordinal and its result. The harness parks the
-- events answered GAP and applies them again, through this file, once
-- their predecessor applied.

-- @batch
-- Accounts first, in id order, so that the locks below are the only row
-- locks this transaction takes, always in the same order: two batches
-- sharing aggregates cannot deadlock.
INSERT INTO {{account}} (id, balance, version)
SELECT DISTINCT a, 0, 0 FROM unnest(:aggregate_id::text[]) AS t(a) ORDER BY a
ON CONFLICT DO NOTHING;

SELECT id FROM {{account}} WHERE id = ANY (:aggregate_id::text[]) ORDER BY id FOR UPDATE;

-- Under those locks nobody else decides for these aggregates: what the
-- inbox holds now is what it holds at commit, and one pass decides every
-- event, as the built-in batch strategy does: first the increments (each
-- applies at the next version), then the snapshots in delivery order
-- (keep-latest). The statement joins nothing but index lookups and
-- decides with window functions over each aggregate's events, so its plan
-- stays good when PostgreSQL switches to a generic plan (which guesses a
-- batch of 10 events).
WITH ev AS (
    SELECT * FROM unnest(:ordinal::int[], :source::text[], :event_id::text[], :aggregate_id::text[],
                         :version::bigint[], :amount::bigint[], :kind::text[], :event_time::timestamptz[])
        AS e(ord, source, event_id, aggregate_id, version, amount, kind, event_time)
), known AS (
    -- Each event with its account and whether the inbox knows it. A second
    -- copy of an event in the batch reads as its redelivery would.
    SELECT e.*, a.version AS cur, a.balance AS bal,
           EXISTS (SELECT 1 FROM {{schema}}.inbox i
                   WHERE i.consumer = :consumer AND i.source = e.source AND i.event_id = e.event_id) AS seen,
           row_number() OVER (PARTITION BY e.source, e.event_id ORDER BY e.ord) AS copy
    FROM ev e JOIN {{account}} a ON a.id = e.aggregate_id
), cand AS (
    SELECT *, kind = 'increment' AND copy = 1 AND NOT seen AND version > cur AS inc,
              kind = 'snapshot' AND copy = 1 AND NOT seen AS snap
    FROM known
), ranked AS (
    -- Increments ahead of the account, in runs of consecutive versions; of
    -- two events carrying one version, the first by identity is in line.
    SELECT *, row_number() OVER (PARTITION BY aggregate_id, version, inc ORDER BY source, event_id) AS tie,
              version - dense_rank() OVER (PARTITION BY aggregate_id, inc ORDER BY version) AS run
    FROM cand
), inc_decided AS (
    -- An increment applies when its run starts right after the account's
    -- version.
    SELECT *, inc AND tie = 1 AND min(version) OVER (PARTITION BY aggregate_id, inc, run) = cur + 1 AS inc_applies
    FROM ranked
), snap_decided AS (
    -- Then the snapshots, in delivery order: each applies when newer than
    -- the version the increments reached and every snapshot before it.
    SELECT *, snap AND version > greatest(
                  coalesce(max(version) FILTER (WHERE inc_applies) OVER (PARTITION BY aggregate_id), cur),
                  coalesce(max(version) FILTER (WHERE snap) OVER (PARTITION BY aggregate_id ORDER BY ord
                           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)) AS snap_applies,
              bool_or(inc_applies) OVER (PARTITION BY aggregate_id, version) AS version_taken
    FROM inc_decided
), decided AS (
    SELECT *, CASE
                  WHEN copy > 1 THEN NULL
                  WHEN seen THEN 'DUPLICATE'
                  WHEN inc_applies OR snap_applies THEN 'APPLIED'
                  WHEN snap OR version <= cur OR version_taken THEN 'STALE'
                  ELSE 'GAP'
              END AS result,
              max(version) FILTER (WHERE snap_applies) OVER (PARTITION BY aggregate_id) AS snapv
    FROM snap_decided
), claimed AS (
    -- The inbox rows of the events that take effect, in this transaction.
    INSERT INTO {{schema}}.inbox (consumer, source, event_id, aggregate_id, aggregate_version, event_time)
    SELECT :consumer, source, event_id, aggregate_id, version, event_time FROM decided WHERE result = 'APPLIED'
    ON CONFLICT DO NOTHING
    RETURNING 1
), changes AS (
    -- Each account after the batch: the newest applied snapshot, or the
    -- current balance plus the applied increments.
    SELECT aggregate_id, min(cur) AS cur,
           greatest(min(cur), max(version) FILTER (WHERE result = 'APPLIED')) AS newv,
           coalesce(max(amount) FILTER (WHERE snap_applies AND version = snapv),
                    min(bal) + coalesce(sum(amount) FILTER (WHERE inc_applies), 0)) AS newbal
    FROM decided GROUP BY aggregate_id
    HAVING bool_or(result = 'APPLIED')
), updated AS (
    UPDATE {{account}} a SET balance = c.newbal, version = c.newv
    FROM changes c WHERE a.id = c.aggregate_id AND a.version = c.cur
    RETURNING 1
), checked AS (
    -- Every applied event claimed its key and every changed account moved:
    -- anything else means someone decided without the locks, and the
    -- whole batch rolls back and is tried again (IB001).
    SELECT (SELECT count(*) FROM claimed) = (SELECT count(*) FROM decided WHERE result = 'APPLIED')
       AND (SELECT count(*) FROM updated) = (SELECT count(*) FROM changes) AS ok
)
SELECT d.ord AS ordinal,
       CASE
           WHEN NOT c.ok THEN {{schema}}.inbox_not_applied('batch', 0)
           WHEN d.copy = 1 THEN d.result
           WHEN first_value(d.result) OVER w = 'APPLIED' THEN 'DUPLICATE'
           ELSE first_value(d.result) OVER w
       END AS result
FROM decided d CROSS JOIN checked c
WINDOW w AS (PARTITION BY d.source, d.event_id ORDER BY d.ord)
ORDER BY d.ord

-- @prune
-- Retention: delete old inbox rows in bounded batches.
DELETE FROM {{schema}}.inbox WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM {{schema}}.inbox WHERE applied_at < :before ORDER BY applied_at LIMIT :limit))
