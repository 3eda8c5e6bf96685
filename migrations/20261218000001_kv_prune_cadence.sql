-- The compare-and-set prunes only when its caller says a prune is due (issue 20 §3). Each
-- key-value write is due with probability 1/16 (`kv::PRUNE_EVERY`), drawn by the replica; a
-- write that is not due passes a batch of 0 here and pays neither the probe nor the locking
-- delete. Under callgrind the probe was 45,000 of the call's 372,000 instructions, for a delete
-- that found nothing on nearly every call (docs/benchmarks.md, "The prune's cadence").
-- Two smaller changes, same rules:
-- - the scope is set by an assignment, which plpgsql evaluates as a simple expression, where
--   PERFORM ran a query through the executor;
-- - the probe is a PERFORM … LIMIT 1 and a test of FOUND, where EXISTS wrapped it in a
--   sub-plan.
CREATE OR REPLACE FUNCTION gatehouse_kv_cas(
    p_tenant uuid, p_key text, p_kind text, p_expected jsonb, p_next jsonb, p_ttl_ms bigint, p_prune bigint,
    p_log_id uuid, p_actor text, p_target text, p_before jsonb, p_after jsonb, p_request_id text
) RETURNS boolean
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    won boolean;
    scope text;
BEGIN
    IF current_user <> 'gatehouse_app' THEN
        SET LOCAL ROLE gatehouse_app;
    END IF;
    scope := set_config('gatehouse.tenant_id', p_tenant::text, true);
    -- The prune leaves the CAS's own key alone: the decision treats an expired row of it as
    -- absent. A MATERIALIZED CTE runs the locking sub-select once (see `kv/store.rs`). The
    -- probe (the same index range, no lock) skips it when there is nothing to prune.
    IF p_prune > 0 THEN
        PERFORM FROM kv_entries WHERE tenant_id = p_tenant AND expires_at <= now() AND key <> p_key LIMIT 1;
        IF FOUND THEN
            WITH doomed AS MATERIALIZED (
                     SELECT key FROM kv_entries WHERE tenant_id = p_tenant AND expires_at <= now() AND key <> p_key
                     ORDER BY expires_at LIMIT p_prune FOR UPDATE SKIP LOCKED)
            DELETE FROM kv_entries k USING doomed WHERE k.tenant_id = p_tenant AND k.key = doomed.key;
        END IF;
    END IF;
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
