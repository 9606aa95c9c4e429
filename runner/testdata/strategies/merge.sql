-- A correct strategy written independently of the shipped examples: the
-- business change is one MERGE. Tests judge it in every scenario.
--
-- description: inbox claim, then one MERGE applying increments at the next version and snapshots at any newer one
-- outcome: rows

-- @claim
INSERT INTO {{schema}}.inbox (consumer, source, event_id, aggregate_id, aggregate_version, event_time)
VALUES (:consumer, :source, :event_id, :aggregate_id, :version, :event_time)
ON CONFLICT DO NOTHING

-- @effect
MERGE INTO {{account}} AS a
USING (SELECT :aggregate_id::text AS id, :amount::bigint AS amount, :version::bigint AS version, :kind::text AS kind) AS e
ON a.id = e.id
WHEN MATCHED AND e.kind = 'snapshot' AND a.version < e.version THEN
    UPDATE SET balance = e.amount, version = e.version
WHEN MATCHED AND e.kind = 'increment' AND a.version = e.version - 1 THEN
    UPDATE SET balance = a.balance + e.amount, version = e.version
WHEN NOT MATCHED AND (e.kind = 'snapshot' OR e.version = 1) THEN
    INSERT (id, balance, version) VALUES (e.id, e.amount, e.version)
