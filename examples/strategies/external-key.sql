-- inboxbench strategy file: the article's transaction with a payment at
-- the external service, as the built-in ext-key strategy runs it: the
-- idempotency key is the event's identity, the call happens in the
-- transaction after the change applied, and the inbox row and the change
-- commit only once the service answered.
--
-- description: tx.sql plus a payment per applied increment, called before the commit with the key consumer/source/event_id
-- outcome: rows
-- external: before-commit
--
-- With external: before-commit the harness runs the @external statement
-- after @effect changed its row, sends the request it returns to the
-- external service and commits after the answer. A call that fails (no
-- answer, the service refused it) rolls the event back, claim included:
-- the redelivery calls again with the same key and gets the stored
-- result, so the payment is made once. The key is the crux: one that
-- changes between attempts (a random id, the attempt's time) pays twice
-- when a call times out after the service applied it.

-- @claim
INSERT INTO {{schema}}.inbox (consumer, source, event_id, aggregate_id, aggregate_version)
VALUES (:consumer, :source, :event_id, :aggregate_id, :version)
ON CONFLICT DO NOTHING

-- @effect
-- As tx.sql: increments at the next version (v1 creates the account),
-- snapshots keep the latest.
INSERT INTO {{account}} AS a (id, balance, version)
SELECT :aggregate_id, :amount::bigint, :version::bigint
WHERE :kind = 'snapshot' OR :version::bigint = 1
   OR EXISTS (SELECT 1 FROM {{account}} WHERE id = :aggregate_id)
ON CONFLICT (id) DO UPDATE
SET balance = CASE WHEN :kind = 'snapshot' THEN excluded.balance ELSE a.balance + excluded.balance END,
    version = excluded.version
WHERE CASE WHEN :kind = 'snapshot' THEN a.version < excluded.version
           ELSE a.version = excluded.version - 1 END

-- @external
-- The request to send: the key and the payment's amount. A snapshot
-- carries state, not an action: no row, no call.
SELECT :consumer || '/' || :source || '/' || :event_id AS request_key, :amount::bigint AS amount
WHERE :kind = 'increment'
