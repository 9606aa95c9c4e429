-- The service's tables, as its own migration would create them. inboxbench
-- runs this file in the cell's schema (search_path set to it) before the
-- instances start; the service names no schema itself (its JDBC URL carries
-- currentSchema).
CREATE TABLE account (
    id      text   PRIMARY KEY,
    balance bigint NOT NULL,
    version bigint NOT NULL
);
CREATE TABLE inbox (
    consumer text NOT NULL,
    source   text NOT NULL,
    event_id text NOT NULL,
    PRIMARY KEY (consumer, source, event_id)
);
