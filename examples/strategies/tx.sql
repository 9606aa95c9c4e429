-- inboxbench strategy file: the article's transaction, as the built-in tx
-- strategy runs it. Start your own from this file: it passes the checker.
--
-- description: the article's two statements in one transaction: INSERT inbox … ON CONFLICT DO NOTHING, then the version-guarded account upsert
-- outcome: rows
--
-- With outcome rows the runner decides by affected rows, as the article
-- does. @claim inserted 0 rows → DUPLICATE (roll back); @effect changed
-- 1 row → APPLIED (commit); 0 rows → the account's version, read under a
-- row lock, says STALE or GAP (roll back, claim included).

-- @claim
-- The inbox key is (consumer, source, event_id): the primary key, not a
-- SELECT beforehand, arbitrates between concurrent deliveries.
INSERT INTO {{schema}}.inbox (consumer, source, event_id, aggregate_id, aggregate_version)
VALUES (:consumer, :source, :event_id, :aggregate_id, :version)
ON CONFLICT DO NOTHING

-- @effect
-- One statement for every case, so exactly one row changes when the event
-- applies and none when it must not:
--   increment v1      creates the account, or takes a pre-created (id, 0, 0) row;
--   increment v > 1   applies only at version = v - 1 (never read-then-update);
--   snapshot          keep-latest: only a strictly newer version overwrites.
-- An increment v > 1 for an account that does not exist yet inserts nothing
-- (0 rows: a gap).
INSERT INTO {{account}} AS a (id, balance, version)
SELECT :aggregate_id, :amount::bigint, :version::bigint
WHERE :kind = 'snapshot' OR :version::bigint = 1
   OR EXISTS (SELECT 1 FROM {{account}} WHERE id = :aggregate_id)
ON CONFLICT (id) DO UPDATE
SET balance = CASE WHEN :kind = 'snapshot' THEN excluded.balance ELSE a.balance + excluded.balance END,
    version = excluded.version
WHERE CASE WHEN :kind = 'snapshot' THEN a.version < excluded.version
           ELSE a.version = excluded.version - 1 END

-- @prune
-- Retention: delete old inbox rows in bounded batches (bench inbox prune
-- does the same for the built-in strategies).
DELETE FROM {{schema}}.inbox WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM {{schema}}.inbox WHERE applied_at < :before ORDER BY applied_at LIMIT :limit))
