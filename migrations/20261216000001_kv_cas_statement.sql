-- A key-value compare-and-set as one autocommitted statement (issue 20 §3): one round trip
-- instead of three (BEGIN with the scope, the statement, COMMIT).
--
-- The function takes the transaction-local scope itself, in order, before anything it reads:
-- the application role (a no-op where the session already has it; it keeps row-level security
-- on for a session that connected as the owner, as every transaction's `SET LOCAL ROLE` does),
-- then the tenant. Both are LOCAL, so they end with the
-- statement's own implicit transaction. The code calls it as a statement of its own, or
-- inside a transaction already scoped to the same tenant (behind a transaction pooler, or with
-- an Idempotency-Key to claim), where these settings change nothing; so the scope never
-- outlives what the caller meant.
--
-- Its body is the whole compare-and-set: the prune (of other keys' expired rows), the
-- conditional decision, and the admin-log row exactly when the decision won, all in one
-- transaction. At READ COMMITTED (an implicit transaction's default, and the transaction
-- form's) the decision is re-checked on the latest row version under its row lock. No tenant epoch moves here, so no replica waits.
--
-- p_kind: 'insert' (only when no live row holds the key; an expired one is replaced),
-- 'update' (the live value equals p_expected), 'delete' (the same, then delete).
CREATE FUNCTION gatehouse_kv_cas(
    p_tenant uuid, p_key text, p_kind text, p_expected jsonb, p_next jsonb, p_ttl_ms bigint, p_prune bigint,
    p_log_id uuid, p_actor text, p_target text, p_before jsonb, p_after jsonb, p_request_id text
) RETURNS boolean
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    won boolean;
BEGIN
    SET LOCAL ROLE gatehouse_app;
    PERFORM set_config('gatehouse.tenant_id', p_tenant::text, true);
    -- The prune leaves the CAS's own key alone: the decision treats an expired row of it as
    -- absent. A MATERIALIZED CTE runs the locking sub-select once (see `kv/store.rs`).
    WITH doomed AS MATERIALIZED (
             SELECT key FROM kv_entries WHERE tenant_id = p_tenant AND expires_at <= now() AND key <> p_key
             ORDER BY expires_at LIMIT p_prune FOR UPDATE SKIP LOCKED)
    DELETE FROM kv_entries k USING doomed WHERE k.tenant_id = p_tenant AND k.key = doomed.key;
    IF p_kind = 'insert' THEN
        INSERT INTO kv_entries (tenant_id, key, value, expires_at)
        VALUES (p_tenant, p_key, p_next, now() + p_ttl_ms * interval '1 millisecond')
        ON CONFLICT (tenant_id, key) DO UPDATE
            SET value = EXCLUDED.value, expires_at = EXCLUDED.expires_at, updated_at = now()
            WHERE kv_entries.expires_at IS NOT NULL AND kv_entries.expires_at <= now();
    ELSIF p_kind = 'update' THEN
        UPDATE kv_entries SET value = p_next, expires_at = now() + p_ttl_ms * interval '1 millisecond', updated_at = now()
         WHERE tenant_id = p_tenant AND key = p_key AND value = p_expected AND (expires_at IS NULL OR expires_at > now());
    ELSIF p_kind = 'delete' THEN
        DELETE FROM kv_entries
         WHERE tenant_id = p_tenant AND key = p_key AND value = p_expected AND (expires_at IS NULL OR expires_at > now());
    ELSE
        RAISE EXCEPTION 'gatehouse_kv_cas: unknown kind %', p_kind USING ERRCODE = '22023';
    END IF;
    -- FOUND: the decision wrote its row (an ON CONFLICT whose WHERE refused writes none).
    won := FOUND;
    IF won THEN
        INSERT INTO admin_log (id, tenant_id, actor, action, target, before, after, request_id)
        VALUES (p_log_id, p_tenant, p_actor, 'kv.compare_and_set', p_target, p_before, p_after, p_request_id);
    END IF;
    RETURN won;
END
$$;
-- The pool's sessions run as the application role (`SET ROLE` at connect), so that role calls
-- it. It gains nothing by that: any of its sessions may set the tenant setting itself; which
-- tenant a call acts for is the code's to decide, and row-level security holds to it.
REVOKE ALL ON FUNCTION gatehouse_kv_cas(uuid, text, text, jsonb, jsonb, bigint, bigint, uuid, text, text, jsonb, jsonb, text)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION gatehouse_kv_cas(uuid, text, text, jsonb, jsonb, bigint, bigint, uuid, text, text, jsonb, jsonb, text)
    TO gatehouse_app;
