-- Foundation: roles, tenant context functions, tenants, members, key-value store, admin log.
--
-- Conventions every later migration follows:
--   * a tenant-owned table has tenant_id first in its primary key, ENABLEs and FORCEs row-level
--     security, and has a policy on gatehouse_current_tenant() / gatehouse_is_platform();
--   * the application role gatehouse_app owns nothing and gets only the privileges it needs.

-- The application role. The embedded default and the test harness create it before migrating;
-- against another server the owner creates it here (it needs CREATEROLE for that).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'gatehouse_app') THEN
        BEGIN
            CREATE ROLE gatehouse_app NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS NOINHERIT;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
        END;
    END IF;
    IF NOT pg_has_role(current_user, 'gatehouse_app', 'MEMBER') THEN
        EXECUTE format('GRANT gatehouse_app TO %I', current_user);
    END IF;
END
$$;

GRANT USAGE ON SCHEMA public TO gatehouse_app;
GRANT SELECT ON _sqlx_migrations TO gatehouse_app;

-- The transaction-local tenant context, set once per request transaction with a bound parameter.
CREATE FUNCTION gatehouse_current_tenant() RETURNS uuid
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT nullif(current_setting('gatehouse.tenant_id', true), '')::uuid $$;

-- Platform-wide work (provisioning, sweeps, reports) sets this explicitly; the code logs why.
CREATE FUNCTION gatehouse_is_platform() RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT coalesce(current_setting('gatehouse.platform', true), '') = 'on' $$;

-- Makes a tenant-owned table follow the tenancy rules: row-level security enabled and forced,
-- and one policy admitting the transaction's tenant (or the platform context). Every later
-- tenant-owned table calls it; the tenancy tests check the catalog for each.
CREATE FUNCTION gatehouse_scope_to_tenant(t regclass) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', t);
    EXECUTE format('ALTER TABLE %s FORCE ROW LEVEL SECURITY', t);
    EXECUTE format('CREATE POLICY tenant_scope ON %s '
                   'USING (tenant_id = gatehouse_current_tenant() OR gatehouse_is_platform()) '
                   'WITH CHECK (tenant_id = gatehouse_current_tenant() OR gatehouse_is_platform())', t);
END
$$;
REVOKE ALL ON FUNCTION gatehouse_scope_to_tenant(regclass) FROM PUBLIC;

-- Tenants are the root of tenancy: readable by every context (a request resolves its tenant's
-- slug before it has a tenant context), written only in platform context.
CREATE TABLE tenants (
    id uuid PRIMARY KEY,
    slug text NOT NULL CONSTRAINT tenants_slug_key UNIQUE
        CONSTRAINT tenants_slug_format CHECK (slug ~ '^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$'),
    name text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    status text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'suspended', 'deleting', 'reaped')),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE tenants ENABLE ROW LEVEL SECURITY;
ALTER TABLE tenants FORCE ROW LEVEL SECURITY;
CREATE POLICY tenants_read ON tenants FOR SELECT USING (true);
CREATE POLICY tenants_insert ON tenants FOR INSERT WITH CHECK (gatehouse_is_platform());
CREATE POLICY tenants_update ON tenants FOR UPDATE USING (gatehouse_is_platform()) WITH CHECK (gatehouse_is_platform());
GRANT SELECT, INSERT, UPDATE ON tenants TO gatehouse_app;

CREATE TABLE members (
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    id uuid NOT NULL,
    issuer text NOT NULL,
    subject text NOT NULL,
    email text,
    display_name text,
    role text NOT NULL CHECK (role IN ('owner', 'admin', 'operator', 'member')),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id),
    CONSTRAINT members_principal_key UNIQUE (tenant_id, issuer, subject)
);
SELECT gatehouse_scope_to_tenant('members');
GRANT SELECT, INSERT, UPDATE, DELETE ON members TO gatehouse_app;

-- Per-tenant key-value store. Keys sort bytewise (COLLATE "C") so prefix pages are index ranges.
-- An expired row counts as absent everywhere and is pruned in bounded batches on write.
CREATE TABLE kv_entries (
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    key text COLLATE "C" NOT NULL CHECK (octet_length(key) BETWEEN 1 AND 512),
    value jsonb NOT NULL,
    expires_at timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, key)
);
CREATE INDEX kv_entries_expiry ON kv_entries (tenant_id, expires_at) WHERE expires_at IS NOT NULL;
SELECT gatehouse_scope_to_tenant('kv_entries');
GRANT SELECT, INSERT, UPDATE, DELETE ON kv_entries TO gatehouse_app;

-- Append-only admin log. The application may INSERT and SELECT, never UPDATE or DELETE: the
-- database refuses them. Platform actions have a null tenant_id, so this one table keys on its
-- time-ordered id (UUIDv7) alone, with tenant_id leading its index instead.
CREATE TABLE admin_log (
    id uuid PRIMARY KEY,
    tenant_id uuid REFERENCES tenants (id),
    actor text NOT NULL,
    action text NOT NULL,
    target text NOT NULL,
    before jsonb,
    after jsonb,
    request_id text,
    at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX admin_log_tenant_at ON admin_log (tenant_id, at, id);
ALTER TABLE admin_log ENABLE ROW LEVEL SECURITY;
ALTER TABLE admin_log FORCE ROW LEVEL SECURITY;
CREATE POLICY admin_log_read ON admin_log FOR SELECT
    USING (tenant_id = gatehouse_current_tenant() OR gatehouse_is_platform());
CREATE POLICY admin_log_append ON admin_log FOR INSERT
    WITH CHECK (tenant_id = gatehouse_current_tenant() OR gatehouse_is_platform());
GRANT SELECT, INSERT ON admin_log TO gatehouse_app;
