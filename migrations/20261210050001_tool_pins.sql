-- Pinned tool definitions (issue 23 §3): per workspace and connector, the definition of each
-- downstream tool as first seen or as last approved (`digest`, `definition`), and a different
-- definition the server lists now, quarantined until an admin approves it (`pending_*`). The
-- served catalog (connector_catalogs.tools) is derived from these rows in the catalog store's
-- transaction, so agents never see an unapproved definition.
CREATE TABLE tool_pins (
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    workspace_id uuid NOT NULL,
    connector_id text NOT NULL,
    tool_name text NOT NULL,
    -- NULL for a new tool quarantined before any approval (`quarantine_new_tools`).
    digest text,
    definition jsonb,
    pending_digest text,
    pending jsonb,
    pinned_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    changed_at timestamptz,
    approved_at timestamptz,
    approved_by text,
    PRIMARY KEY (tenant_id, workspace_id, connector_id, tool_name),
    FOREIGN KEY (tenant_id, workspace_id) REFERENCES workspaces (tenant_id, id),
    CONSTRAINT tool_pins_something CHECK (digest IS NOT NULL OR pending_digest IS NOT NULL),
    CONSTRAINT tool_pins_definition CHECK ((digest IS NULL) = (definition IS NULL)),
    CONSTRAINT tool_pins_pending CHECK ((pending_digest IS NULL) = (pending IS NULL))
);
SELECT gatehouse_scope_to_tenant('tool_pins');
GRANT SELECT, INSERT, UPDATE, DELETE ON tool_pins TO gatehouse_app;
