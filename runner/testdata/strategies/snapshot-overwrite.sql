-- A negative control: snapshots overwrite whatever version the account is
-- at, so an older snapshot arriving late takes the account back.
--
-- description: keep-latest forgotten: a snapshot always overwrites
-- broken: true
-- outcome: rows

-- @claim
INSERT INTO {{schema}}.inbox (consumer, source, event_id, aggregate_id, aggregate_version)
VALUES (:consumer, :source, :event_id, :aggregate_id, :version)
ON CONFLICT DO NOTHING

-- @effect
INSERT INTO {{account}} AS a (id, balance, version)
SELECT :aggregate_id, :amount::bigint, :version::bigint
WHERE :kind = 'snapshot' OR :version::bigint = 1
   OR EXISTS (SELECT 1 FROM {{account}} WHERE id = :aggregate_id)
ON CONFLICT (id) DO UPDATE
SET balance = CASE WHEN :kind = 'snapshot' THEN excluded.balance ELSE a.balance + excluded.balance END,
    version = excluded.version
WHERE :kind = 'snapshot' OR a.version = excluded.version - 1
