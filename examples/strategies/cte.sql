-- inboxbench strategy file: one statement per event, as the built-in cte
-- strategy runs it (parking aside). Start your own from this file: it
-- passes the checker.
--
-- description: one data-modifying CTE claims the inbox key, applies the version-guarded change and returns the result (autocommit, one round trip)
-- outcome: result
--
-- With outcome result the statement returns a text column named result.
-- A single @apply statement runs on its own (autocommit), and what it wrote
-- commits whatever it answers: a GAP or STALE must leave no inbox row
-- behind (the checker reports inbox-without-effect otherwise). One
-- statement cannot take back its own claim, so when the change did not
-- apply it calls {{schema}}.inbox_not_applied (created by the built-in
-- migration), which raises SQLSTATE IB001: the statement rolls back, claim
-- included, and the runner reads the account's version to say STALE or GAP
-- (or runs the statement again if the predecessor committed meanwhile).

-- @apply
WITH ins AS (
    -- The claim: the primary key arbitrates between concurrent deliveries.
    INSERT INTO {{schema}}.inbox (consumer, source, event_id, aggregate_id, aggregate_version)
    VALUES (:consumer, :source, :event_id, :aggregate_id, :version)
    ON CONFLICT DO NOTHING
    RETURNING 1
), upd AS (
    -- An increment v > 1 applies only at version = v - 1.
    UPDATE {{account}} SET balance = balance + :amount::bigint, version = :version::bigint
    WHERE id = :aggregate_id::text AND version = :version::bigint - 1
      AND :version::bigint > 1 AND :kind::text = 'increment' AND EXISTS (SELECT 1 FROM ins)
    RETURNING 1
), cre AS (
    -- An increment v1 creates its account, or takes a pre-created (id, 0, 0) row.
    INSERT INTO {{account}} AS a (id, balance, version)
    SELECT :aggregate_id::text, :amount::bigint, 1
    WHERE :version::bigint = 1 AND :kind::text = 'increment' AND EXISTS (SELECT 1 FROM ins)
    ON CONFLICT (id) DO UPDATE SET balance = a.balance + excluded.balance, version = 1 WHERE a.version = 0
    RETURNING 1
), snap AS (
    -- A snapshot is keep-latest: only a strictly newer version overwrites.
    INSERT INTO {{account}} AS a (id, balance, version)
    SELECT :aggregate_id::text, :amount::bigint, :version::bigint
    WHERE :kind::text = 'snapshot' AND EXISTS (SELECT 1 FROM ins)
    ON CONFLICT (id) DO UPDATE SET balance = excluded.balance, version = excluded.version
    WHERE a.version < excluded.version
    RETURNING 1
)
SELECT CASE
    WHEN NOT EXISTS (SELECT 1 FROM ins) THEN 'DUPLICATE'
    WHEN EXISTS (SELECT 1 FROM upd) OR EXISTS (SELECT 1 FROM cre) OR EXISTS (SELECT 1 FROM snap) THEN 'APPLIED'
    ELSE {{schema}}.inbox_not_applied(:aggregate_id::text, :version::bigint)
END AS result
