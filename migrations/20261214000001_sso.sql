-- Tenant-owned sign-in (issue 22 item 1): OpenID Connect connections per tenant.
--
-- A connection is the tenant's own provider: its issuer, Gatehouse's client there, and how
-- Gatehouse authenticates to it (a client secret or a private key, sealed in the vault; the
-- envelope is bound to tenant, connection and purpose). `role_mapping` maps values of the
-- `groups_claim` claim to roles; `jit` says whether a first sign-in creates the member
-- (`create`) or needs an invitation (`invitation`). `version` is the compare-and-set token of
-- every edit.
CREATE TABLE sso_connections (
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    id uuid NOT NULL,
    name text NOT NULL CHECK (length(name) BETWEEN 1 AND 80),
    issuer text NOT NULL,
    client_id text NOT NULL,
    auth_method text NOT NULL CHECK (auth_method IN ('client_secret_basic', 'client_secret_post', 'private_key_jwt')),
    key_id text NOT NULL,
    envelope text NOT NULL,
    groups_claim text NOT NULL,
    role_mapping jsonb NOT NULL,
    default_role text NOT NULL CHECK (default_role IN ('admin', 'operator', 'member')),
    jit text NOT NULL CHECK (jit IN ('create', 'invitation')),
    version bigint NOT NULL DEFAULT 1,
    created_by text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id),
    CONSTRAINT sso_connections_client_key UNIQUE (tenant_id, issuer, client_id)
);
SELECT gatehouse_scope_to_tenant('sso_connections');
GRANT SELECT, INSERT, UPDATE, DELETE ON sso_connections TO gatehouse_app;

-- Sign-in discovery: an email domain belongs to at most one connection in the deployment, so
-- an address routes to exactly one provider.
CREATE TABLE sso_domains (
    tenant_id uuid NOT NULL,
    domain text NOT NULL CHECK (domain = lower(domain) AND length(domain) BETWEEN 3 AND 253),
    connection_id uuid NOT NULL,
    PRIMARY KEY (tenant_id, domain),
    CONSTRAINT sso_domains_domain_key UNIQUE (domain),
    FOREIGN KEY (tenant_id, connection_id) REFERENCES sso_connections (tenant_id, id) ON DELETE CASCADE
);
CREATE INDEX sso_domains_connection ON sso_domains (tenant_id, connection_id);
SELECT gatehouse_scope_to_tenant('sso_domains');
GRANT SELECT, INSERT, UPDATE, DELETE ON sso_domains TO gatehouse_app;

-- A tenant that requires SSO refuses its members' sessions from any other sign-in path
-- (enforced only while it has a connection, so it can never lock everyone out).
ALTER TABLE tenants ADD COLUMN sso_required boolean NOT NULL DEFAULT false;

-- A flow started through a tenant's connection names it; the callback finishes it there.
ALTER TABLE oidc_flows ADD COLUMN sso_tenant_id uuid, ADD COLUMN sso_connection_id uuid;

-- A session signed in through a tenant's connection acts in that tenant only.
ALTER TABLE sessions ADD COLUMN sso_tenant_id uuid;
