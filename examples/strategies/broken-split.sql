-- inboxbench strategy file: the article's split commit, a NEGATIVE CONTROL.
-- Run it to see the checker FAIL it with inbox-without-effect.
--
-- description: the article's split: the inbox row commits on its own, the balance update runs in a second transaction that may roll back (negative control)
-- broken: true
-- outcome: rows
-- transaction: split
--
-- The split transaction is the mistake. The @claim commits by itself before
-- the @effect's transaction begins. When that transaction rolls back, the
-- redelivery finds the inbox row and is skipped as a DUPLICATE: dedup
-- "succeeded", the balance never changed. The SQL is otherwise tx.sql's.
--
-- To make the rollback happen without a fault in the workload, this file's
-- handler "crashes" on every 40th effect it runs, as the article's
-- experiment rolls its update back: it raises query_canceled, what a
-- statement timeout raises, a failure the runner retries (an error that
-- would come back the same way, such as a plain RAISE, is dead-lettered
-- instead). A sequence counts the runs because it is not transactional, so
-- a redelivery does not crash again. In one
-- transaction (tx.sql plus this crash) the claim rolls back with the
-- update, the redelivery applies the event, and the checker passes it.

-- @ddl
CREATE SEQUENCE {{schema}}.handler_runs;
CREATE FUNCTION {{schema}}.handler(p_event_id text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF nextval('{{schema}}.handler_runs') % 40 = 0 THEN
        RAISE EXCEPTION 'handler crashed before the balance update of %', p_event_id USING ERRCODE = 'query_canceled';
    END IF;
END
$$;

-- @claim
INSERT INTO {{schema}}.inbox (consumer, source, event_id, aggregate_id, aggregate_version)
VALUES (:consumer, :source, :event_id, :aggregate_id, :version)
ON CONFLICT DO NOTHING

-- @effect
-- A SELECT does not count as a changed row; only the upsert below does.
SELECT {{schema}}.handler(:event_id);
INSERT INTO {{account}} AS a (id, balance, version)
SELECT :aggregate_id, :amount::bigint, :version::bigint
WHERE :kind = 'snapshot' OR :version::bigint = 1
   OR EXISTS (SELECT 1 FROM {{account}} WHERE id = :aggregate_id)
ON CONFLICT (id) DO UPDATE
SET balance = CASE WHEN :kind = 'snapshot' THEN excluded.balance ELSE a.balance + excluded.balance END,
    version = excluded.version
WHERE CASE WHEN :kind = 'snapshot' THEN a.version < excluded.version
           ELSE a.version = excluded.version - 1 END
