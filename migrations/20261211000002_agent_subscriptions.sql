-- Handshake-era agents' resource subscriptions (issue 19 §3, §4). An agent subscribes with a
-- POST that any replica may serve, and hears the updates on its GET stream, which any replica
-- may hold: the subscription is kept here, for the stream's replica to read. `listener` is a
-- SHA-256 of the agent's session id, its caller, workspace and pool, so a row names no
-- subject and a session id another caller presents reaches no one else's subscriptions.
-- Rows expire a day after their subscription (renewed by subscribing again); expired rows are
-- never read and are deleted by the tenant's next subscription.
CREATE TABLE agent_subscriptions (
    tenant_id uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    workspace_id uuid NOT NULL,
    listener bytea NOT NULL CHECK (length(listener) = 32),
    uri text NOT NULL CHECK (length(uri) BETWEEN 1 AND 2048),
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, listener, uri)
);
CREATE INDEX agent_subscriptions_expiry ON agent_subscriptions (tenant_id, expires_at);
SELECT gatehouse_scope_to_tenant('agent_subscriptions');
GRANT SELECT, INSERT, UPDATE, DELETE ON agent_subscriptions TO gatehouse_app;
