-- The application role is an ordinary role, as in the article's lab:
-- what the benchmark does must work with a production service account's rights.
CREATE ROLE inboxbench LOGIN PASSWORD 'inboxbench' NOSUPERUSER NOCREATEROLE;
GRANT pg_monitor TO inboxbench;
GRANT pg_signal_backend TO inboxbench;
CREATE DATABASE inboxbench OWNER inboxbench;
\connect inboxbench
CREATE EXTENSION IF NOT EXISTS pg_stat_statements;
