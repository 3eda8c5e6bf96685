-- Per-tenant epochs: a counter bumped, in the same transaction, by every change that could
-- alter a machine's authentication or a workspace's served configuration (a revoked token or
-- credential, a member's role, the tenant's status, a workspace binding or status, a stored
-- catalog). Replicas keep what they derived from those rows in memory, labelled with the
-- epoch they read before deriving it, and check the epoch on every request: one primary-key
-- read instead of the full lookups, with no staleness. A revocation is still refused on the
-- very next request on every replica.
ALTER TABLE tenants ADD COLUMN epoch bigint NOT NULL DEFAULT 0;

-- Status and slug changes bump the tenant's own row.
CREATE FUNCTION gatehouse_bump_own_epoch() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    NEW.epoch := OLD.epoch + 1;
    RETURN NEW;
END
$$;
CREATE TRIGGER tenants_epoch BEFORE UPDATE OF status, slug ON tenants
    FOR EACH ROW EXECUTE FUNCTION gatehouse_bump_own_epoch();

-- Changes to tenant rows bump their tenant's epoch. Updating `tenants` needs the platform
-- context, which this function switches on for its one statement only, as the owner.
CREATE FUNCTION gatehouse_bump_epoch() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = public, pg_temp
AS $$
DECLARE
    t uuid;
    prior text := coalesce(current_setting('gatehouse.platform', true), '');
BEGIN
    IF TG_OP = 'DELETE' THEN t := OLD.tenant_id; ELSE t := NEW.tenant_id; END IF;
    PERFORM set_config('gatehouse.platform', 'on', true);
    UPDATE tenants SET epoch = epoch + 1 WHERE id = t;
    PERFORM set_config('gatehouse.platform', prior, true);
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION gatehouse_bump_epoch() FROM PUBLIC;

-- last_used_at is deliberately absent: using a credential changes nothing anyone derives.
CREATE TRIGGER access_tokens_epoch AFTER UPDATE OF revoked_at, token_hash, principal_issuer, principal_subject OR DELETE
    ON access_tokens FOR EACH ROW EXECUTE FUNCTION gatehouse_bump_epoch();
CREATE TRIGGER service_credentials_epoch AFTER UPDATE OF revoked_at, secret_hash, client_id OR DELETE
    ON service_credentials FOR EACH ROW EXECUTE FUNCTION gatehouse_bump_epoch();
CREATE TRIGGER members_epoch AFTER INSERT OR UPDATE OF role, issuer, subject OR DELETE
    ON members FOR EACH ROW EXECUTE FUNCTION gatehouse_bump_epoch();
CREATE TRIGGER permission_overrides_epoch AFTER INSERT OR UPDATE OR DELETE
    ON permission_overrides FOR EACH ROW EXECUTE FUNCTION gatehouse_bump_epoch();
CREATE TRIGGER workspaces_epoch AFTER INSERT OR UPDATE OR DELETE
    ON workspaces FOR EACH ROW EXECUTE FUNCTION gatehouse_bump_epoch();
CREATE TRIGGER connector_catalogs_epoch AFTER INSERT OR UPDATE OR DELETE
    ON connector_catalogs FOR EACH ROW EXECUTE FUNCTION gatehouse_bump_epoch();

-- Machine authentication that also answers the tenant's epoch, read before the lookups it
-- labels (each statement of a function takes a newer snapshot, so a change committed in
-- between can only make the label older than the answer, never newer).
CREATE FUNCTION gatehouse_authenticate_machine_at(p_client_id text, p_secret_hash bytea, p_token_hash bytea)
RETURNS TABLE (
    tenant_id uuid,
    tenant_slug text,
    tenant_status text,
    credential_id uuid,
    token_id uuid,
    principal_issuer text,
    principal_subject text,
    member_id uuid,
    member_role text,
    epoch bigint
)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = public, pg_temp
AS $$
DECLARE
    e bigint;
BEGIN
    PERFORM set_config('gatehouse.platform', 'on', true);
    SELECT t.epoch INTO e FROM service_credentials sc JOIN tenants t ON t.id = sc.tenant_id WHERE sc.client_id = p_client_id;
    PERFORM set_config('gatehouse.platform', '', true);
    IF e IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY SELECT a.*, e FROM gatehouse_authenticate_machine(p_client_id, p_secret_hash, p_token_hash) a;
END
$$;
REVOKE ALL ON FUNCTION gatehouse_authenticate_machine_at(text, bytea, bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION gatehouse_authenticate_machine_at(text, bytea, bytea) TO gatehouse_app;
