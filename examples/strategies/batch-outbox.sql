-- inboxbench strategy file: batch-ledger.sql with one more write per
-- applied event, an outbox message (JSON) for the downstream consumers of
-- the balance, written in the same transaction: the change a team makes
-- when other services must hear of every credit (the transactional outbox).
-- Two writes per event beyond batch.sql, so its cost stands well clear of
-- the 10% gate of `bench compare`: the slower file of the A/A check
-- (docs/measurements.md), and a second known cost for the A/B recipe
-- (docs/strategy-files.md).
--
-- description: batch-ledger.sql, plus an outbox message (JSON, ordered by a bigserial) for every applied event
-- outcome: batch
--
-- Every event parameter is an array over the batch (delivery order);
-- :ordinal numbers the events 1..n. The last statement returns one row
-- per event, with its ordinal and its result. The harness hands each
-- event once per batch (a second copy gets the first one's result), adds
-- the parked events of the batch's accounts, parks the events answered
-- GAP and applies them again, through this file, once their predecessor
-- applied.

-- @ddl
CREATE TABLE {{schema}}.ledger (
    consumer     text        NOT NULL,
    event_id     text        NOT NULL,
    aggregate_id text        NOT NULL,
    version      bigint      NOT NULL,
    amount       bigint      NOT NULL,
    booked_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);
CREATE INDEX ON {{schema}}.ledger (aggregate_id, version);
CREATE TABLE {{schema}}.balance_outbox (
    id           bigserial   PRIMARY KEY,
    aggregate_id text        NOT NULL,
    type         text        NOT NULL,
    payload      jsonb       NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);

-- @batch
-- Accounts first, in id order, so that the locks below are the only row
-- locks this transaction takes, always in the same order: two batches
-- sharing aggregates cannot deadlock. Once an account exists, looking it
-- up costs half of what ON CONFLICT's check does.
INSERT INTO {{account}} (id, balance, version)
SELECT DISTINCT a, 0, 0 FROM unnest(:aggregate_id::text[]) AS t(a)
WHERE NOT EXISTS (SELECT 1 FROM {{account}} x WHERE x.id = t.a) ORDER BY a
ON CONFLICT DO NOTHING;

-- The ids as a set to join, not "id = ANY (...)": a sequential scan of
-- the accounts would compare each row with every id of the parameter
-- (docs/strategy-files.md, "Plans that hold").
SELECT id FROM {{account}} WHERE id IN (SELECT unnest(:aggregate_id::text[])) ORDER BY id FOR UPDATE;

-- Under those locks nobody else decides for these aggregates: what the
-- inbox holds now is what it holds at commit, and one pass decides every
-- event, as the built-in batch strategy does: first the increments (each
-- applies at the next version), then the snapshots in delivery order
-- (keep-latest). The statement joins nothing but index lookups and
-- decides with window functions over each aggregate's events, so its plan
-- stays good when PostgreSQL switches to a generic plan (which guesses a
-- batch of 10 events). The windows over all events share one sort, by
-- aggregate and version; only the snapshots are sorted by delivery order.
WITH ev AS (
    SELECT * FROM unnest(:ordinal::int[], :source::text[], :event_id::text[], :aggregate_id::text[],
                         :version::bigint[], :amount::bigint[], :kind::text[], :event_time::timestamptz[])
        AS e(ord, source, event_id, aggregate_id, version, amount, kind, event_time)
), snaps AS (
    -- Each snapshot with the newest version of the snapshots of its
    -- aggregate delivered before it.
    SELECT ord, coalesce(max(version) OVER (PARTITION BY aggregate_id ORDER BY ord
                                            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS snap_before
    FROM unnest(:ordinal::int[], :aggregate_id::text[], :version::bigint[], :kind::text[]) AS e(ord, aggregate_id, version, kind)
    WHERE kind = 'snapshot'
), known AS (
    -- Each event with its account and whether the inbox knows it. Only
    -- an event at or below the account's version can be known: one that
    -- took effect left the account at its version or later, so only those
    -- (the redeliveries and the stale) cost an index lookup. Should the
    -- inbox know a newer one anyway, its claim below finds the key taken
    -- and the batch fails instead of deciding wrong.
    SELECT e.*, a.version AS cur, a.balance AS bal, s.snap_before,
           e.version <= a.version AND EXISTS (
               SELECT 1 FROM {{schema}}.inbox i
               WHERE i.consumer = :consumer AND i.source = e.source AND i.event_id = e.event_id) AS seen
    FROM ev e JOIN {{account}} a ON a.id = e.aggregate_id
    LEFT JOIN snaps s ON s.ord = e.ord
), cand AS (
    SELECT *, kind = 'increment' AND NOT seen AND version > cur AS inc,
              kind = 'snapshot' AND NOT seen AS snap
    FROM known
), inc_decided AS (
    -- An increment applies when it is the k-th distinct version ahead of
    -- the account and its version is the account's plus k: the versions
    -- before it are all in the batch. Of two events carrying one version,
    -- the first by identity is in line.
    SELECT *, inc AND version - cur = dense_rank() OVER (PARTITION BY aggregate_id, inc ORDER BY version)
                  AND rank() OVER (PARTITION BY aggregate_id, inc ORDER BY version)
                      = row_number() OVER (PARTITION BY aggregate_id, inc ORDER BY version, source, event_id)
              AS inc_applies
    FROM cand
), inc_counted AS (
    -- The increments that apply take versions cur+1 … incv.
    SELECT *, cur + count(*) FILTER (WHERE inc_applies) OVER (PARTITION BY aggregate_id) AS incv
    FROM inc_decided
), decided AS (
    -- Then the snapshots: each applies when newer than incv and than every
    -- snapshot delivered before it (a known snapshot is at most cur).
    SELECT *, CASE
                  WHEN seen THEN 'DUPLICATE'
                  WHEN inc_applies OR snap_applies THEN 'APPLIED'
                  WHEN snap OR version <= incv THEN 'STALE'
                  ELSE 'GAP'
              END AS result
    FROM (SELECT *, snap AND version > greatest(incv, snap_before) AS snap_applies FROM inc_counted) s
), claimed AS (
    -- The inbox rows of the events that take effect, in this transaction.
    INSERT INTO {{schema}}.inbox (consumer, source, event_id, aggregate_id, aggregate_version, event_time)
    SELECT :consumer, source, event_id, aggregate_id, version, event_time FROM decided WHERE result = 'APPLIED'
    ON CONFLICT DO NOTHING
    RETURNING 1
), booked AS (
    -- The ledger row of every event that takes effect, in this transaction.
    INSERT INTO {{schema}}.ledger (consumer, event_id, aggregate_id, version, amount)
    SELECT :consumer, event_id, aggregate_id, version, amount FROM decided WHERE result = 'APPLIED'
    RETURNING 1
), announced AS (
    -- The outbox message of every event that takes effect, in this
    -- transaction: a relay publishes it after the commit, in id order.
    INSERT INTO {{schema}}.balance_outbox (aggregate_id, type, payload)
    SELECT aggregate_id, 'BalanceChanged',
           jsonb_build_object('account', aggregate_id, 'version', version, 'amount', amount,
                              'kind', kind, 'cause', jsonb_build_object('source', source, 'id', event_id))
    FROM decided WHERE result = 'APPLIED' ORDER BY aggregate_id, version
    RETURNING 1
), changes AS (
    -- Each account after the batch: the newest applied snapshot, or the
    -- current balance plus the applied increments.
    SELECT aggregate_id, min(cur) AS cur,
           greatest(min(cur), max(version) FILTER (WHERE result = 'APPLIED')) AS newv,
           coalesce((max(ARRAY[version, amount]) FILTER (WHERE snap_applies))[2],
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
       AND (SELECT count(*) FROM booked) = (SELECT count(*) FROM claimed)
       AND (SELECT count(*) FROM announced) = (SELECT count(*) FROM claimed)
       AND (SELECT count(*) FROM updated) = (SELECT count(*) FROM changes) AS ok
)
SELECT d.ord AS ordinal, CASE WHEN c.ok THEN d.result ELSE {{schema}}.inbox_not_applied('batch', 0) END AS result
FROM decided d CROSS JOIN checked c

-- @prune
-- Retention: delete old inbox rows in bounded batches.
DELETE FROM {{schema}}.inbox WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM {{schema}}.inbox WHERE applied_at < :before ORDER BY applied_at LIMIT :limit))
