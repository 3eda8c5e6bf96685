-- Handshake-era agents' log levels (issue 19 §3). An agent's `logging/setLevel` is a POST any
-- replica may serve, and its later requests may reach any other replica, which must send a
-- 2026-07-28 downstream that level with each request and pass on only the log messages at or
-- above it. `listener` is the same digest of session id, caller, workspace and pool as in
-- `agent_subscriptions`. Rows expire a day after the level was set (renewed by setting it
-- again); expired rows are never read and are deleted by the tenant's next `logging/setLevel`.
CREATE TABLE agent_log_levels (
    tenant_id uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    workspace_id uuid NOT NULL,
    listener bytea NOT NULL CHECK (length(listener) = 32),
    level text NOT NULL
        CHECK (level IN ('debug', 'info', 'notice', 'warning', 'error', 'critical', 'alert', 'emergency')),
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, listener)
);
CREATE INDEX agent_log_levels_expiry ON agent_log_levels (tenant_id, expires_at);
SELECT gatehouse_scope_to_tenant('agent_log_levels');
GRANT SELECT, INSERT, UPDATE, DELETE ON agent_log_levels TO gatehouse_app;
