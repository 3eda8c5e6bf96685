-- Downstream OAuth. A pending flow maps the SHA-256 of its `state` to the sealed PKCE verifier
-- for 15 minutes and is claimed once, by compare-and-set, at the callback. It was started
-- either by a member (who must be the one to come back) or by a connect link.
CREATE TABLE oauth_flows (
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    state_hash bytea NOT NULL,
    workspace_id uuid NOT NULL,
    connector_id text NOT NULL,
    owner text NOT NULL,
    started_by uuid,
    link_id uuid,
    verifier text NOT NULL,
    client_id text NOT NULL,
    token_endpoint text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    claimed_at timestamptz,
    PRIMARY KEY (tenant_id, state_hash),
    FOREIGN KEY (tenant_id, workspace_id) REFERENCES workspaces (tenant_id, id),
    CONSTRAINT oauth_flows_origin_check CHECK ((started_by IS NULL) <> (link_id IS NULL))
);
SELECT gatehouse_scope_to_tenant('oauth_flows');
GRANT SELECT, INSERT, UPDATE, DELETE ON oauth_flows TO gatehouse_app;

-- A grant's state beside its tokens (which live sealed in `credentials`, purpose oauth_grant):
-- when the access token expires (database clock), the refresh lease (holder, until), and the
-- digest of the refresh token last sent, recorded before sending so that it is never sent
-- twice. `auth_required` is a dead grant: its tokens are gone and a person must connect again.
CREATE TABLE oauth_grants (
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    workspace_id uuid NOT NULL,
    connector_id text NOT NULL,
    owner text NOT NULL,
    member_id uuid,
    status text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'auth_required')),
    access_expires_at timestamptz,
    client_id text NOT NULL,
    token_endpoint text NOT NULL,
    lease_holder uuid,
    lease_until timestamptz,
    spent_refresh bytea,
    account_label text,
    connected_by text NOT NULL,
    connected_at timestamptz NOT NULL DEFAULT now(),
    refreshed_at timestamptz,
    PRIMARY KEY (tenant_id, workspace_id, connector_id, owner),
    FOREIGN KEY (tenant_id, workspace_id) REFERENCES workspaces (tenant_id, id),
    CONSTRAINT oauth_grants_member_fkey FOREIGN KEY (tenant_id, member_id) REFERENCES members (tenant_id, id) ON DELETE CASCADE
);
SELECT gatehouse_scope_to_tenant('oauth_grants');
GRANT SELECT, INSERT, UPDATE, DELETE ON oauth_grants TO gatehouse_app;

-- Every grant change (connect, lease, refresh, death, disconnect) bumps the tenant's epoch, so
-- every replica reads the grant again on its next request.
CREATE TRIGGER oauth_grants_epoch AFTER INSERT OR UPDATE OR DELETE
    ON oauth_grants FOR EACH ROW EXECUTE FUNCTION gatehouse_bump_epoch();

-- Clients Gatehouse registered for itself (RFC 7591), one per workspace connector and issuer:
-- public clients (PKCE, no secret), so the row holds nothing secret. Replicas racing to
-- register keep the first row; a second registration is left unused at the provider.
CREATE TABLE oauth_clients (
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    workspace_id uuid NOT NULL,
    connector_id text NOT NULL,
    issuer text NOT NULL,
    client_id text NOT NULL,
    registered_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, workspace_id, connector_id, issuer),
    FOREIGN KEY (tenant_id, workspace_id) REFERENCES workspaces (tenant_id, id)
);
SELECT gatehouse_scope_to_tenant('oauth_clients');
GRANT SELECT, INSERT ON oauth_clients TO gatehouse_app;
