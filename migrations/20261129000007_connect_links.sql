-- Connect links: an admin mails a person a link that authorizes one workspace connector's OAuth
-- grant. Only the link's SHA-256 is stored. A link is `outstanding` until exactly one OAuth
-- callback consumes it (`used`, by a conditional update) or an admin revokes it; `restore`
-- turns a used link back to outstanding when storing the credential failed afterwards, and
-- never undoes a revocation. Expiry is the database clock.
CREATE TABLE connect_links (
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    id uuid NOT NULL,
    workspace_id uuid NOT NULL,
    connector_id text NOT NULL,
    email text NOT NULL,
    token_hash bytea NOT NULL,
    status text NOT NULL DEFAULT 'outstanding' CHECK (status IN ('outstanding', 'used', 'revoked')),
    created_by text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    used_at timestamptz,
    account_label text,
    revoked_at timestamptz,
    revoked_by text,
    PRIMARY KEY (tenant_id, id),
    CONSTRAINT connect_links_token_key UNIQUE (token_hash),
    FOREIGN KEY (tenant_id, workspace_id) REFERENCES workspaces (tenant_id, id),
    CONSTRAINT connect_links_used_check CHECK ((status = 'used') = (used_at IS NOT NULL)),
    CONSTRAINT connect_links_revoked_check CHECK ((status = 'revoked') = (revoked_at IS NOT NULL))
);
CREATE INDEX connect_links_by_time ON connect_links (tenant_id, created_at DESC, id);
SELECT gatehouse_scope_to_tenant('connect_links');
GRANT SELECT, INSERT, UPDATE ON connect_links TO gatehouse_app;

-- Mail that could not be (or is not configured to be) sent by SMTP waits here for the operator
-- (`gatehouse outbox list`). A connect link's mail carries the link itself: the outbox is its
-- delivery channel, readable only by the trusted CLI.
CREATE TABLE mail_outbox (
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    id uuid NOT NULL,
    to_address text NOT NULL,
    subject text NOT NULL,
    body text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    sent_at timestamptz,
    PRIMARY KEY (tenant_id, id)
);
SELECT gatehouse_scope_to_tenant('mail_outbox');
GRANT SELECT, INSERT, UPDATE ON mail_outbox TO gatehouse_app;
