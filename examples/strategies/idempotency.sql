-- inboxbench strategy file: the article's transaction plus client
-- idempotency keys, in one PL/pgSQL function.
--
-- description: claim the inbox key, then the client's idempotency key (a replay answers DUPLICATE, a reused key with another request CONFLICT), then the version-guarded change; all in one transaction
-- outcome: result
-- idempotency-keys: true
--
-- A client idempotency key is scoped by tenant and operation, and bound to
-- the request's content (:request_hash): the same key with the same
-- content is a replay of the first request (DUPLICATE, no second effect),
-- with other content it is a conflict to reject (CONFLICT). Either way
-- nothing this event wrote may stay, so the function withdraws its own
-- claims before it answers; so does a change that did not apply (STALE or
-- GAP). With outcome result, what the statement wrote commits: the
-- function itself keeps it consistent. The business table is an argument
-- ({{account}}: each consumer may have its own), so the function writes it
-- with EXECUTE.

-- @ddl
CREATE FUNCTION {{schema}}.apply_event(
    p_account regclass, p_consumer text, p_source text, p_event_id text, p_aggregate text, p_version bigint,
    p_amount bigint, p_kind text, p_key text, p_tenant text, p_operation text, p_hash text
) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_hash text;
    v_cur  bigint;
    v_rows bigint;
BEGIN
    -- The inbox key: the primary key arbitrates between concurrent deliveries.
    INSERT INTO {{schema}}.inbox (consumer, source, event_id, aggregate_id, aggregate_version)
    VALUES (p_consumer, p_source, p_event_id, p_aggregate, p_version)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN 'DUPLICATE';
    END IF;
    -- The client's key, claimed with the request's content.
    IF p_key <> '' THEN
        INSERT INTO {{schema}}.idempotency (tenant, operation, key, request_hash, result, consumer, source, event_id)
        VALUES (p_tenant, p_operation, p_key, p_hash, 'APPLIED', p_consumer, p_source, p_event_id)
        ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            SELECT request_hash INTO v_hash FROM {{schema}}.idempotency
            WHERE tenant = p_tenant AND operation = p_operation AND key = p_key;
            DELETE FROM {{schema}}.inbox WHERE consumer = p_consumer AND source = p_source AND event_id = p_event_id;
            RETURN CASE WHEN v_hash = p_hash THEN 'DUPLICATE' ELSE 'CONFLICT' END;
        END IF;
    END IF;
    -- The change, version-guarded; on no row, the version (read under the
    -- account's row lock) says why, or the predecessor just committed and
    -- the change is tried again.
    FOR attempt IN 1..3 LOOP
        IF p_kind = 'snapshot' THEN
            EXECUTE format('INSERT INTO %s AS a (id, balance, version) VALUES ($1, $2, $3)
                ON CONFLICT (id) DO UPDATE SET balance = excluded.balance, version = excluded.version
                WHERE a.version < excluded.version', p_account) USING p_aggregate, p_amount, p_version;
        ELSIF p_version = 1 THEN
            EXECUTE format('INSERT INTO %s AS a (id, balance, version) VALUES ($1, $2, 1)
                ON CONFLICT (id) DO UPDATE SET balance = a.balance + excluded.balance, version = 1
                WHERE a.version = 0', p_account) USING p_aggregate, p_amount;
        ELSE
            EXECUTE format('UPDATE %s SET balance = balance + $2, version = $3
                WHERE id = $1 AND version = $3 - 1', p_account) USING p_aggregate, p_amount, p_version;
        END IF;
        GET DIAGNOSTICS v_rows = ROW_COUNT;
        IF v_rows = 1 THEN
            RETURN 'APPLIED';
        END IF;
        EXECUTE format('SELECT version FROM %s WHERE id = $1 FOR UPDATE', p_account) INTO v_cur USING p_aggregate;
        EXIT WHEN p_kind = 'snapshot' OR coalesce(v_cur, 0) <> p_version - 1;
    END LOOP;
    DELETE FROM {{schema}}.inbox WHERE consumer = p_consumer AND source = p_source AND event_id = p_event_id;
    IF p_key <> '' THEN
        DELETE FROM {{schema}}.idempotency WHERE tenant = p_tenant AND operation = p_operation AND key = p_key
            AND source = p_source AND event_id = p_event_id;
    END IF;
    RETURN CASE WHEN p_version <= coalesce(v_cur, 0) THEN 'STALE' ELSE 'GAP' END;
END
$$;

-- @apply
SELECT {{schema}}.apply_event('{{account}}', :consumer, :source, :event_id, :aggregate_id, :version, :amount, :kind,
                              :idempotency_key, :tenant, :operation, :request_hash) AS result
