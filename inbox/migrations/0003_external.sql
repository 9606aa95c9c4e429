-- inboxbench inbox core, version 3: the durable state of effects beyond
-- the database (the ext-* strategies, inbox/external.go). Both tables are
-- the harness's, read by the checker (ReadSnapshot) as well. CREATE … IF
-- NOT EXISTS: a schema whose migration records were rewound
-- (TestMigrateFromVersion1) upgrades in place.

-- One row per (consumer, event) whose external call is in flight or done
-- (ext-lease): PROCESSING while a delivery holds its lease, DONE once the
-- call's result and the event's effect committed together, STUCK when the
-- operation was taken over too often and waits for a person. Unlike an
-- inbox row, a row here does not mean the event took effect: only DONE
-- does.
CREATE TABLE IF NOT EXISTS @schema@.external_op (
    consumer          text        NOT NULL,
    source            text        NOT NULL,
    event_id          text        NOT NULL,
    aggregate_id      text        NOT NULL,
    aggregate_version bigint      NOT NULL,
    request_key       text        NOT NULL,
    state             text        NOT NULL CHECK (state IN ('PROCESSING', 'DONE', 'STUCK')),
    lease_until       timestamptz NOT NULL,
    attempts          int         NOT NULL DEFAULT 1,
    payment           text,
    updated_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, source, event_id)
);

-- The transactional outbox (ext-outbox): the request is written in the
-- inbox transaction, and a relay sends it with its key, at least once,
-- then marks it sent.
CREATE TABLE IF NOT EXISTS @schema@.outbox (
    id           bigserial   PRIMARY KEY,
    consumer     text        NOT NULL,
    source       text        NOT NULL,
    event_id     text        NOT NULL,
    request_key  text        NOT NULL,
    account      text        NOT NULL,
    amount       bigint      NOT NULL,
    intended_at  timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    sent_at      timestamptz,
    attempts     int         NOT NULL DEFAULT 0,
    payment      text
);
CREATE INDEX IF NOT EXISTS outbox_pending_idx ON @schema@.outbox (id) WHERE sent_at IS NULL;
