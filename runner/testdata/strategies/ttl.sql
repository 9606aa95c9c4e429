-- A negative control: the dedup claim is a marker that expires after
-- 100 ms (a cache with a TTL), and the inbox row is written beside the
-- change without deciding anything. A redelivery after the TTL passes the
-- marker and only the version check stops it (STALE): the final state is
-- right, but the checker names the dedup-miss.
--
-- description: dedup on a marker that expires after 100 ms
-- broken: true
-- outcome: rows

-- @ddl
CREATE TABLE {{schema}}.seen (key text PRIMARY KEY, at timestamptz NOT NULL DEFAULT clock_timestamp());

-- @claim
-- The marker decides; the inbox row rides along, its count ignored.
WITH row AS (
    INSERT INTO {{schema}}.inbox (consumer, source, event_id, aggregate_id, aggregate_version)
    VALUES (:consumer, :source, :event_id, :aggregate_id, :version)
    ON CONFLICT DO NOTHING
)
INSERT INTO {{schema}}.seen (key) VALUES (:consumer || '/' || :source || '/' || :event_id)
ON CONFLICT (key) DO UPDATE SET at = excluded.at WHERE {{schema}}.seen.at < clock_timestamp() - interval '100 milliseconds'

-- @effect
INSERT INTO {{account}} AS a (id, balance, version)
SELECT :aggregate_id, :amount::bigint, :version::bigint
WHERE :kind = 'snapshot' OR :version::bigint = 1
   OR EXISTS (SELECT 1 FROM {{account}} WHERE id = :aggregate_id)
ON CONFLICT (id) DO UPDATE
SET balance = CASE WHEN :kind = 'snapshot' THEN excluded.balance ELSE a.balance + excluded.balance END,
    version = excluded.version
WHERE CASE WHEN :kind = 'snapshot' THEN a.version < excluded.version
           ELSE a.version = excluded.version - 1 END
