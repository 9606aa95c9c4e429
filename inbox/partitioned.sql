-- The time-partitioned inbox. It replaces the inbox of migration 0001 in a
-- schema being created, right after that migration, so every later
-- migration applies to both layouts alike. @schema@ is the quoted schema,
-- @interval@ the partition interval in seconds.
--
-- A partitioned table's primary key must include its partition key. The
-- key is the event's own time (CloudEvents time), which every redelivery
-- and republish of the same event carries unchanged, so both copies land
-- in the same partition and the primary key still arbitrates. Partitioning
-- by applied_at instead would put a redelivery on another day into another
-- partition, where its insert would succeed: a second effect.
DROP TABLE @schema@.inbox;
CREATE TABLE @schema@.inbox (
    consumer          text        NOT NULL,
    source            text        NOT NULL,
    event_id          text        NOT NULL,
    aggregate_id      text        NOT NULL,
    aggregate_version bigint      NOT NULL,
    applied_at        timestamptz NOT NULL DEFAULT now(),
    event_time        timestamptz NOT NULL,
    PRIMARY KEY (consumer, source, event_id, event_time)
) PARTITION BY RANGE (event_time);
CREATE INDEX inbox_applied_at_idx ON @schema@.inbox (applied_at);

-- One row: the partition interval, fixed for the schema's life (partitions
-- are aligned to multiples of it since the Unix epoch), and the retention
-- horizon. Events older than the horizon had their partitions dropped: the
-- inbox no longer knows whether they took effect, so it refuses them
-- instead of applying them a second time. NULL until the first drop.
CREATE TABLE @schema@.inbox_partitioning (
    singleton        boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    interval_seconds bigint      NOT NULL CHECK (interval_seconds > 0),
    horizon          timestamptz
);
INSERT INTO @schema@.inbox_partitioning (interval_seconds) VALUES (@interval@);
