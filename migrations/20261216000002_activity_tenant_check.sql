-- An activity row's tenant is checked once per statement instead of once per row (issue 20 §4).
--
-- The foreign key from activity.tenant_id to tenants ran its check as a query of its own for
-- every inserted row: about 30% of PostgreSQL's CPU under load, where the activity writer
-- inserts up to 256 rows in one statement. The same rule now holds through a statement-level
-- trigger that reads the statement's new rows as a transition table and looks each of their
-- tenants up once. A row of a tenant that does not exist still fails the whole
-- statement with SQLSTATE 23503 (foreign_key_violation), so a refused batch writes nothing,
-- as before.
--
-- The other side of the key: a tenant that activity rows name cannot be deleted or given
-- another id (a row trigger on tenants, also 23503). The foreign key also locked each
-- referenced tenant (FOR KEY SHARE) against a concurrent delete; no lock is taken here because
-- no role but a superuser can delete a tenant: tenants has no DELETE policy under FORCE ROW
-- LEVEL SECURITY, and gatehouse_app has no DELETE privilege on it (docs/decisions.md, "The
-- activity row's tenant, checked per statement").
ALTER TABLE activity DROP CONSTRAINT activity_tenant_id_fkey;

-- The statement's rows (`added`) whose tenant does not exist fail the statement.
CREATE FUNCTION gatehouse_activity_tenants_exist() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    missing uuid;
BEGIN
    -- A batch names few tenants: each is looked up once.
    SELECT d.tenant_id INTO missing FROM (SELECT DISTINCT tenant_id FROM added) d
     WHERE NOT EXISTS (SELECT 1 FROM tenants t WHERE t.id = d.tenant_id) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'insert or update on table "activity" violates the tenant check'
            USING ERRCODE = 'foreign_key_violation',
                  DETAIL = format('Key (tenant_id)=(%s) is not present in table "tenants".', missing),
                  TABLE = 'activity', COLUMN = 'tenant_id';
    END IF;
    RETURN NULL;
END
$$;

-- Transition tables take one event per trigger: one for INSERT, one for UPDATE. An UPDATE that
-- leaves tenant_id alone (the erasure's redaction) checks rows that already passed, cheaply.
CREATE TRIGGER activity_tenant_on_insert AFTER INSERT ON activity
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION gatehouse_activity_tenants_exist();
CREATE TRIGGER activity_tenant_on_update AFTER UPDATE ON activity
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION gatehouse_activity_tenants_exist();

-- A tenant that activity rows still name keeps its row and its id.
CREATE FUNCTION gatehouse_tenant_keeps_activity() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM activity WHERE tenant_id = OLD.id) THEN
        RAISE EXCEPTION 'update or delete on table "tenants" violates the tenant check of table "activity"'
            USING ERRCODE = 'foreign_key_violation',
                  DETAIL = format('Key (id)=(%s) is still referenced from table "activity".', OLD.id),
                  TABLE = 'tenants';
    END IF;
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER tenants_keep_activity_on_delete BEFORE DELETE ON tenants
    FOR EACH ROW EXECUTE FUNCTION gatehouse_tenant_keeps_activity();
CREATE TRIGGER tenants_keep_activity_on_rekey BEFORE UPDATE OF id ON tenants
    FOR EACH ROW WHEN (OLD.id IS DISTINCT FROM NEW.id) EXECUTE FUNCTION gatehouse_tenant_keeps_activity();
