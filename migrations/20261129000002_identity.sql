-- Identity: sign-in flows and sessions for people, invitations, service credentials and
-- access tokens for machines, per-tenant permission overrides, the development provider.
--
-- sessions, oidc_flows and dev_idp_codes are not tenant-owned: a person signs in before any
-- tenant is chosen and may belong to several. They hold only hashes of their secrets.

CREATE TABLE oidc_flows (
    state_hash bytea PRIMARY KEY,
    browser_hash bytea NOT NULL,
    pkce_verifier text NOT NULL,
    nonce text NOT NULL,
    next_path text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    claimed_at timestamptz
);
CREATE INDEX oidc_flows_expiry ON oidc_flows (expires_at);
GRANT SELECT, INSERT, UPDATE, DELETE ON oidc_flows TO gatehouse_app;

CREATE TABLE sessions (
    id_hash bytea PRIMARY KEY,
    issuer text NOT NULL,
    subject text NOT NULL,
    email text,
    display_name text,
    csrf_token text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now(),
    idle_expires_at timestamptz NOT NULL,
    absolute_expires_at timestamptz NOT NULL
);
CREATE INDEX sessions_principal ON sessions (issuer, subject);
CREATE INDEX sessions_expiry ON sessions (idle_expires_at);
GRANT SELECT, INSERT, UPDATE, DELETE ON sessions TO gatehouse_app;

CREATE TABLE dev_idp_codes (
    code_hash bytea PRIMARY KEY,
    redirect_uri text NOT NULL,
    code_challenge text NOT NULL,
    nonce text,
    subject text NOT NULL,
    email text NOT NULL,
    display_name text NOT NULL,
    expires_at timestamptz NOT NULL,
    used_at timestamptz
);
CREATE INDEX dev_idp_codes_expiry ON dev_idp_codes (expires_at);
GRANT SELECT, INSERT, UPDATE, DELETE ON dev_idp_codes TO gatehouse_app;

-- A membership fence per principal would go here with the control plane; removal ends
-- sessions directly (see members).

CREATE TABLE invitations (
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    id uuid NOT NULL,
    email text NOT NULL CHECK (email = lower(email) AND length(email) BETWEEN 3 AND 320),
    role text NOT NULL CHECK (role IN ('owner', 'admin', 'operator', 'member')),
    invited_by text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    consumed_at timestamptz,
    consumed_by uuid,
    revoked_at timestamptz,
    PRIMARY KEY (tenant_id, id)
);
CREATE UNIQUE INDEX invitations_outstanding ON invitations (tenant_id, email) WHERE consumed_at IS NULL AND revoked_at IS NULL;
CREATE INDEX invitations_email ON invitations (email) WHERE consumed_at IS NULL AND revoked_at IS NULL;
SELECT gatehouse_scope_to_tenant('invitations');
GRANT SELECT, INSERT, UPDATE ON invitations TO gatehouse_app;

CREATE TABLE service_credentials (
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    id uuid NOT NULL,
    client_id text NOT NULL CONSTRAINT service_credentials_client_id_key UNIQUE,
    secret_hash bytea NOT NULL,
    name text NOT NULL CHECK (length(name) BETWEEN 1 AND 80),
    created_by text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at timestamptz,
    PRIMARY KEY (tenant_id, id)
);
SELECT gatehouse_scope_to_tenant('service_credentials');
GRANT SELECT, INSERT, UPDATE ON service_credentials TO gatehouse_app;

CREATE TABLE access_tokens (
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    id uuid NOT NULL,
    token_hash bytea NOT NULL CONSTRAINT access_tokens_hash_key UNIQUE,
    prefix text NOT NULL,
    name text NOT NULL CHECK (length(name) BETWEEN 1 AND 80),
    created_by text NOT NULL,
    principal_issuer text,
    principal_subject text,
    created_at timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at timestamptz,
    PRIMARY KEY (tenant_id, id),
    CHECK ((principal_issuer IS NULL) = (principal_subject IS NULL))
);
SELECT gatehouse_scope_to_tenant('access_tokens');
GRANT SELECT, INSERT, UPDATE ON access_tokens TO gatehouse_app;

-- Live-token reservations: a create increments `live` only while it is below `cap` (one
-- conditional statement), a revoke decrements it.
CREATE TABLE token_quotas (
    tenant_id uuid PRIMARY KEY REFERENCES tenants (id),
    live integer NOT NULL DEFAULT 0 CHECK (live >= 0),
    cap integer NOT NULL DEFAULT 100 CHECK (cap BETWEEN 1 AND 1000)
);
SELECT gatehouse_scope_to_tenant('token_quotas');
GRANT SELECT, INSERT, UPDATE ON token_quotas TO gatehouse_app;

CREATE TABLE permission_overrides (
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    role text NOT NULL CHECK (role IN ('owner', 'admin', 'operator', 'member')),
    permission text NOT NULL CHECK (permission IN ('connector_access', 'credential_administration', 'activity_access', 'access_token_management')),
    allowed boolean NOT NULL,
    PRIMARY KEY (tenant_id, role, permission)
);
SELECT gatehouse_scope_to_tenant('permission_overrides');
GRANT SELECT, INSERT, UPDATE, DELETE ON permission_overrides TO gatehouse_app;

-- Machine authentication in one round trip, before any tenant context exists. Runs as the
-- owner with the platform context switched on only for its own lookups; it needs the exact
-- client id, the secret's digest and the token's digest, so it cannot enumerate anything.
-- A token carrying a person's principal only authenticates while that person is a member.
-- last_used_at is written at most once a minute.
CREATE FUNCTION gatehouse_authenticate_machine(p_client_id text, p_secret_hash bytea, p_token_hash bytea)
RETURNS TABLE (
    tenant_id uuid,
    tenant_slug text,
    tenant_status text,
    credential_id uuid,
    token_id uuid,
    principal_issuer text,
    principal_subject text,
    member_id uuid,
    member_role text
)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = public, pg_temp
AS $$
DECLARE
    hit record;
BEGIN
    PERFORM set_config('gatehouse.platform', 'on', true);
    SELECT t.id AS t_id, t.slug, t.status, sc.id AS sc_id, sc.last_used_at AS sc_used,
           tok.id AS tok_id, tok.last_used_at AS tok_used, tok.principal_issuer AS p_iss, tok.principal_subject AS p_sub,
           m.id AS m_id, m.role AS m_role
      INTO hit
      FROM service_credentials sc
      JOIN access_tokens tok ON tok.tenant_id = sc.tenant_id
      JOIN tenants t ON t.id = sc.tenant_id
      LEFT JOIN members m ON m.tenant_id = tok.tenant_id
                         AND m.issuer = tok.principal_issuer AND m.subject = tok.principal_subject
     WHERE sc.client_id = p_client_id AND sc.secret_hash = p_secret_hash AND sc.revoked_at IS NULL
       AND tok.token_hash = p_token_hash AND tok.revoked_at IS NULL
       AND (tok.principal_issuer IS NULL OR m.id IS NOT NULL);
    IF NOT FOUND THEN
        PERFORM set_config('gatehouse.platform', '', true);
        RETURN;
    END IF;
    IF hit.sc_used IS NULL OR hit.sc_used < now() - interval '1 minute' THEN
        UPDATE service_credentials SET last_used_at = now() WHERE service_credentials.tenant_id = hit.t_id AND id = hit.sc_id;
    END IF;
    IF hit.tok_used IS NULL OR hit.tok_used < now() - interval '1 minute' THEN
        UPDATE access_tokens SET last_used_at = now() WHERE access_tokens.tenant_id = hit.t_id AND id = hit.tok_id;
    END IF;
    PERFORM set_config('gatehouse.platform', '', true);
    tenant_id := hit.t_id; tenant_slug := hit.slug; tenant_status := hit.status;
    credential_id := hit.sc_id; token_id := hit.tok_id;
    principal_issuer := hit.p_iss; principal_subject := hit.p_sub;
    member_id := hit.m_id; member_role := hit.m_role;
    RETURN NEXT;
END
$$;
REVOKE ALL ON FUNCTION gatehouse_authenticate_machine(text, bytea, bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION gatehouse_authenticate_machine(text, bytea, bytea) TO gatehouse_app;
