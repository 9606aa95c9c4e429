-- inboxbench inbox core, version 2: the event's own time on its inbox row.
-- Every strategy writes the CloudEvents time here (NULL when the event had
-- none). In this (plain) layout it is only recorded; the partitioned
-- layout (partitioned.sql) partitions by it and has it in its primary key.
-- Adding a nullable column without a default rewrites nothing, so schemas
-- created by an older version upgrade in place.
ALTER TABLE @schema@.inbox ADD COLUMN IF NOT EXISTS event_time timestamptz;
