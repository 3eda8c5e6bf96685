-- A lighter compare-and-set (issue 20 §3), measured statement by statement with pgbench at 16
-- clients (docs/benchmarks.md, "The compare-and-set's body"). Three costs go; the rules stay.
--
-- 1. The admin log's tenant is checked by a row trigger instead of a foreign key. The key's
--    check is a query of its own that also takes FOR KEY SHARE on the tenant's row. Every
--    mutation of a tenant logs a row naming that tenant, so concurrent mutations of one tenant
--    share that row lock, and PostgreSQL records each shared lock as a new multixact. The
--    trigger looks the tenant up without a lock. A row naming a tenant that does not exist is
--    still refused with SQLSTATE 23503 (foreign_key_violation), so the refused statement
--    writes nothing. Platform rows (a null tenant) are not checked, as before.
--    The other side of the key: a tenant that admin-log rows name cannot be deleted or given
--    another id, by the same trigger on tenants that keeps activity's rows (now checking
--    both tables). The lock is not needed: no role but a superuser can delete a tenant or
--    change its id (docs/decisions.md, "The activity row's tenant, checked per statement").
-- 2. The prune looks before it locks. Its locking delete runs only when an expired row of
--    another key exists; a probe of the same partial index answers that. A row that expires
--    or is unlocked just after the probe waits for the next write, as a locked row always did.
-- 3. The role is set only where it differs. `SET LOCAL ROLE gatehouse_app` is a utility
--    statement; the sessions that call this already run as the application role, where it
--    changed nothing. Any other caller still gets it, transaction-local.
ALTER TABLE admin_log DROP CONSTRAINT admin_log_tenant_id_fkey;

CREATE FUNCTION gatehouse_admin_log_tenant_exists() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NEW.tenant_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM tenants t WHERE t.id = NEW.tenant_id) THEN
        RAISE EXCEPTION 'insert or update on table "admin_log" violates the tenant check'
            USING ERRCODE = 'foreign_key_violation',
                  DETAIL = format('Key (tenant_id)=(%s) is not present in table "tenants".', NEW.tenant_id),
                  TABLE = 'admin_log', COLUMN = 'tenant_id';
    END IF;
    RETURN NEW;
END
$$;
-- BEFORE, so a refused row is never written and no after-trigger event is queued per row.
CREATE TRIGGER admin_log_tenant_check BEFORE INSERT OR UPDATE OF tenant_id ON admin_log
    FOR EACH ROW EXECUTE FUNCTION gatehouse_admin_log_tenant_exists();

-- A tenant that activity or admin-log rows still name keeps its row and its id.
CREATE OR REPLACE FUNCTION gatehouse_tenant_keeps_activity() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    naming text;
BEGIN
    IF EXISTS (SELECT 1 FROM activity WHERE tenant_id = OLD.id) THEN
        naming := 'activity';
    ELSIF EXISTS (SELECT 1 FROM admin_log WHERE tenant_id = OLD.id) THEN
        naming := 'admin_log';
    END IF;
    IF naming IS NOT NULL THEN
        RAISE EXCEPTION 'update or delete on table "tenants" violates the tenant check of table "%"', naming
            USING ERRCODE = 'foreign_key_violation',
                  DETAIL = format('Key (id)=(%s) is still referenced from table "%s".', OLD.id, naming),
                  TABLE = 'tenants';
    END IF;
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION gatehouse_kv_cas(
    p_tenant uuid, p_key text, p_kind text, p_expected jsonb, p_next jsonb, p_ttl_ms bigint, p_prune bigint,
    p_log_id uuid, p_actor text, p_target text, p_before jsonb, p_after jsonb, p_request_id text
) RETURNS boolean
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    won boolean;
BEGIN
    IF current_user <> 'gatehouse_app' THEN
        SET LOCAL ROLE gatehouse_app;
    END IF;
    PERFORM set_config('gatehouse.tenant_id', p_tenant::text, true);
    -- The prune leaves the CAS's own key alone: the decision treats an expired row of it as
    -- absent. A MATERIALIZED CTE runs the locking sub-select once (see `kv/store.rs`). The
    -- probe (the same index range, no lock) skips it when there is nothing to prune.
    IF EXISTS (SELECT 1 FROM kv_entries WHERE tenant_id = p_tenant AND expires_at <= now() AND key <> p_key) THEN
        WITH doomed AS MATERIALIZED (
                 SELECT key FROM kv_entries WHERE tenant_id = p_tenant AND expires_at <= now() AND key <> p_key
                 ORDER BY expires_at LIMIT p_prune FOR UPDATE SKIP LOCKED)
        DELETE FROM kv_entries k USING doomed WHERE k.tenant_id = p_tenant AND k.key = doomed.key;
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
