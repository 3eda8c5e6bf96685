-- MCP authorization for interactive agents: Gatehouse is the OAuth 2.1 authorization server
-- (one issuer per tenant, `/t/{tenant}`) and the resource server of every MCP endpoint.
-- Every secret (authorization code, access token, refresh token) is stored only as its
-- SHA-256; expiry is the database clock.

-- A client: registered dynamically (RFC 7591) or named by the URL of its metadata document
-- (the document is fetched again at every authorization, the row keeps what was shown).
-- An admin's revocation refuses the client's tokens on the next request and any new
-- authorization.
CREATE TABLE mcp_clients (
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    id uuid NOT NULL,
    client_id text NOT NULL,
    kind text NOT NULL CHECK (kind IN ('registered', 'metadata_document')),
    name text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    redirect_uris text[] NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz,
    revoked_by text,
    PRIMARY KEY (tenant_id, id),
    CONSTRAINT mcp_clients_client_id_key UNIQUE (tenant_id, client_id)
);
-- Anonymous registrations that never led to a grant are pruned after a day (on write), and
-- at most `registration cap` of them may be waiting at once.
CREATE INDEX mcp_clients_unused ON mcp_clients (tenant_id, created_at) WHERE kind = 'registered';
SELECT gatehouse_scope_to_tenant('mcp_clients');
GRANT SELECT, INSERT, UPDATE, DELETE ON mcp_clients TO gatehouse_app;

-- A grant: one member's consent for one client to one exact MCP endpoint (RFC 8707 resource).
-- It is also the token family: every code, access and refresh token hangs off it, so
-- revoking the grant (by the member, an admin, or a spent refresh token presented again)
-- ends all of them at once. The member is referenced by id without a foreign key: a removed
-- member's row is gone and the join at every request then finds nothing.
CREATE TABLE mcp_grants (
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    id uuid NOT NULL,
    client_ref uuid NOT NULL,
    member_id uuid NOT NULL,
    workspace_id uuid NOT NULL,
    resource text NOT NULL,
    pool text,
    scope text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz,
    revoked_by text,
    revoked_reason text,
    PRIMARY KEY (tenant_id, id),
    FOREIGN KEY (tenant_id, client_ref) REFERENCES mcp_clients (tenant_id, id),
    FOREIGN KEY (tenant_id, workspace_id) REFERENCES workspaces (tenant_id, id),
    CONSTRAINT mcp_grants_revoked_check CHECK ((revoked_at IS NULL) = (revoked_reason IS NULL))
);
CREATE INDEX mcp_grants_by_member ON mcp_grants (tenant_id, member_id, created_at DESC);
CREATE INDEX mcp_grants_by_client ON mcp_grants (tenant_id, client_ref);
SELECT gatehouse_scope_to_tenant('mcp_grants');
GRANT SELECT, INSERT, UPDATE ON mcp_grants TO gatehouse_app;

-- Authorization codes: single use (consumed by a conditional update), short-lived, PKCE S256.
CREATE TABLE mcp_codes (
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    code_hash bytea NOT NULL,
    grant_id uuid NOT NULL,
    redirect_uri text NOT NULL,
    code_challenge text NOT NULL,
    expires_at timestamptz NOT NULL,
    used_at timestamptz,
    PRIMARY KEY (tenant_id, code_hash),
    FOREIGN KEY (tenant_id, grant_id) REFERENCES mcp_grants (tenant_id, id)
);
CREATE INDEX mcp_codes_expiry ON mcp_codes (tenant_id, expires_at);
SELECT gatehouse_scope_to_tenant('mcp_codes');
GRANT SELECT, INSERT, UPDATE, DELETE ON mcp_codes TO gatehouse_app;

-- Access and refresh tokens of a grant. A refresh token is spent by a conditional update
-- (exactly one exchange wins); presenting a spent one revokes the grant.
CREATE TABLE mcp_tokens (
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    token_hash bytea NOT NULL,
    grant_id uuid NOT NULL,
    kind text NOT NULL CHECK (kind IN ('access', 'refresh')),
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    spent_at timestamptz,
    PRIMARY KEY (tenant_id, token_hash),
    FOREIGN KEY (tenant_id, grant_id) REFERENCES mcp_grants (tenant_id, id),
    CONSTRAINT mcp_tokens_spent_check CHECK (kind = 'refresh' OR spent_at IS NULL)
);
CREATE INDEX mcp_tokens_by_grant ON mcp_tokens (tenant_id, grant_id);
-- Prune-on-write: every issuance deletes up to 100 of the tenant's tokens expired over a day.
CREATE INDEX mcp_tokens_expiry ON mcp_tokens (tenant_id, expires_at);
SELECT gatehouse_scope_to_tenant('mcp_tokens');
GRANT SELECT, INSERT, UPDATE, DELETE ON mcp_tokens TO gatehouse_app;
