-- A correct file written as a new user would: examples/strategies/tx.sql
-- with {{schema}}.account where it says {{account}}. It passes every
-- scenario with one consumer, but every consumer's effects land in the
-- default table: loading it warns, and bench conform's two-consumers
-- scenario is N/A for it (inbox/userfile_test.go, conform/conform_test.go).
--
-- description: tx.sql writing {{schema}}.account instead of {{account}}
-- outcome: rows

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
INSERT INTO {{schema}}.account AS a (id, balance, version)
SELECT :aggregate_id, :amount::bigint, :version::bigint
WHERE :kind = 'snapshot' OR :version::bigint = 1
   OR EXISTS (SELECT 1 FROM {{schema}}.account WHERE id = :aggregate_id)
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
