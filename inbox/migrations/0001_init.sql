-- inboxbench inbox core, version 1.
-- @schema@ is replaced by the quoted schema name before this runs, so the
-- functions below are bound to their own schema whatever search_path a
-- caller has.

-- The business table, as in the article. An account comes into existence
-- at (id, 0, 0) the first time something needs to lock it, or directly at
-- version 1 with its first increment (see the package documentation).
CREATE TABLE @schema@.account (
    id      text   PRIMARY KEY,
    balance bigint NOT NULL DEFAULT 0,
    version bigint NOT NULL DEFAULT 0
);

-- One row per (consumer, CloudEvents identity) that took effect. The row
-- and the business change commit in one transaction; the primary key is
-- the arbiter between concurrent deliveries. aggregate_id/version are for
-- the checker, applied_at for retention.
CREATE TABLE @schema@.inbox (
    consumer          text        NOT NULL,
    source            text        NOT NULL,
    event_id          text        NOT NULL,
    aggregate_id      text        NOT NULL,
    aggregate_version bigint      NOT NULL,
    applied_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, source, event_id)
);
CREATE INDEX inbox_applied_at_idx ON @schema@.inbox (applied_at);

-- Version-ahead increments held for their predecessor. A parked event has
-- no inbox row: it gets one when it is drained, in the same transaction.
CREATE TABLE @schema@.parked (
    consumer          text        NOT NULL,
    source            text        NOT NULL,
    event_id          text        NOT NULL,
    aggregate_id      text        NOT NULL,
    aggregate_version bigint      NOT NULL,
    kind              text        NOT NULL,
    amount            bigint      NOT NULL,
    type              text        NOT NULL DEFAULT '',
    event_time        timestamptz,
    idempotency_key   text        NOT NULL DEFAULT '',
    tenant            text        NOT NULL DEFAULT '',
    operation         text        NOT NULL DEFAULT '',
    parked_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, source, event_id)
);
CREATE INDEX parked_aggregate_idx ON @schema@.parked (consumer, aggregate_id, aggregate_version);
CREATE INDEX parked_parked_at_idx ON @schema@.parked (parked_at);

-- Request idempotency: a client key scoped by tenant and operation, with
-- the hash of the request content and the result returned to replays.
CREATE TABLE @schema@.idempotency (
    tenant       text        NOT NULL,
    operation    text        NOT NULL,
    key          text        NOT NULL,
    request_hash text        NOT NULL,
    result       text        NOT NULL,
    consumer     text        NOT NULL,
    source       text        NOT NULL,
    event_id     text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, operation, key)
);

-- Negative controls only (broken-global-key, broken-aggregate-key): a
-- dedup claim on the wrong key. Never used by a correct strategy.
CREATE TABLE @schema@.broken_claim (
    scope      text        NOT NULL,
    claim_key  text        NOT NULL,
    claimed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, claim_key)
);

-- Lets a single statement (the cte strategy) abort itself, rolling back its
-- own inbox row, when its conditional update hit 0 rows. SQLSTATE IB001 is
-- recognised by the Go side, which then decides gap/stale/park under a lock.
CREATE FUNCTION @schema@.inbox_not_applied(p_aggregate text, p_version bigint)
RETURNS text LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'IB001',
        MESSAGE = format('inbox: %s version %s not applied (gap or stale)', p_aggregate, p_version);
END
$$;

-- A VOLATILE plpgsql function takes a fresh snapshot for its query under
-- READ COMMITTED. Called after the account row was locked by the update, it
-- sees every park that committed before the lock was granted, which the
-- statement's own (older) snapshot would miss.
CREATE FUNCTION @schema@.inbox_parked_exists(p_consumer text, p_aggregate text)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM @schema@.parked
                   WHERE consumer = p_consumer AND aggregate_id = p_aggregate);
END
$$;
