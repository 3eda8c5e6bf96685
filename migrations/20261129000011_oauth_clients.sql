-- Static confidential clients, RFC 8707 resource indicators, and revocation intents.

-- A connector's static confidential client keeps its secret in a credential row of its own,
-- owner `oauth_client` (sealed like every slot; never a caller's credential).
ALTER TABLE credentials DROP CONSTRAINT credentials_owner_check;
ALTER TABLE credentials ADD CONSTRAINT credentials_owner_check CHECK (
    (owner = 'shared' AND member_id IS NULL)
    OR (owner = 'oauth_client' AND member_id IS NULL)
    OR (owner = 'member:' || member_id::text)
);

-- How a flow and a grant authenticate at the token endpoint (`none`: a public client), and the
-- resource indicator (RFC 8707) their token requests carry.
ALTER TABLE oauth_flows
    ADD COLUMN client_auth text NOT NULL DEFAULT 'none'
        CHECK (client_auth IN ('none', 'client_secret_basic', 'client_secret_post')),
    ADD COLUMN resource text;
ALTER TABLE oauth_grants
    ADD COLUMN client_auth text NOT NULL DEFAULT 'none'
        CHECK (client_auth IN ('none', 'client_secret_basic', 'client_secret_post')),
    ADD COLUMN resource text;

-- A revocation Gatehouse owes a provider (RFC 7009). Disconnect writes the intent, holding the
-- grant's sealed tokens moved unchanged from `credentials` (same associated data), in the
-- transaction that deletes the grant; the outcome clears the envelope. An intent left without
-- an outcome (a crash between the two) is claimed by one replica's sweep after a grace period
-- longer than the call's deadline, retried once, and settled.
CREATE TABLE oauth_revocations (
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    id uuid NOT NULL,
    workspace_id uuid NOT NULL,
    connector_id text NOT NULL,
    owner text NOT NULL,
    endpoint text NOT NULL,
    client_id text NOT NULL,
    client_auth text NOT NULL CHECK (client_auth IN ('none', 'client_secret_basic', 'client_secret_post')),
    envelope text,
    created_at timestamptz NOT NULL DEFAULT now(),
    claimed_until timestamptz,
    outcome text CHECK (outcome IN ('revoked', 'failed', 'unknown')),
    settled_at timestamptz,
    settled_by text,
    PRIMARY KEY (tenant_id, id),
    FOREIGN KEY (tenant_id, workspace_id) REFERENCES workspaces (tenant_id, id),
    CONSTRAINT oauth_revocations_settled_check CHECK ((outcome IS NULL) = (settled_at IS NULL)),
    CONSTRAINT oauth_revocations_cleared_check CHECK (outcome IS NULL OR envelope IS NULL)
);
-- The sweep finds open intents oldest first; the prune finds settled ones by age.
CREATE INDEX oauth_revocations_open ON oauth_revocations (created_at) WHERE outcome IS NULL;
CREATE INDEX oauth_revocations_settled ON oauth_revocations (settled_at) WHERE outcome IS NOT NULL;
SELECT gatehouse_scope_to_tenant('oauth_revocations');
GRANT SELECT, INSERT, UPDATE, DELETE ON oauth_revocations TO gatehouse_app;
