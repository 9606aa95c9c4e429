-- The application role is an ordinary role, as in the article's lab:
-- what the benchmark does must work with a production service account's rights.
CREATE ROLE inboxbench LOGIN PASSWORD 'inboxbench' NOSUPERUSER NOCREATEROLE;
GRANT pg_monitor TO inboxbench;
GRANT pg_signal_backend TO inboxbench;
-- Only the checker's audit uses it: its logical decoding slot reads the
-- account table's changes from the WAL after a cell (bench run --audit).
ALTER ROLE inboxbench REPLICATION;
GRANT pg_checkpoint TO inboxbench;
CREATE DATABASE inboxbench OWNER inboxbench;
\connect inboxbench
CREATE EXTENSION IF NOT EXISTS pg_stat_statements;
