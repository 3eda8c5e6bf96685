-- Downstream catalogs (the tools a connector's server lists), shared by every replica: fetched
-- once per TTL per connector configuration, refreshed on demand, and read back by replicas that
-- have not fetched it themselves. `config_key` is the digest of the connector configuration the
-- catalog was fetched with, so an edited connector never serves its old catalog.
CREATE TABLE connector_catalogs (
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    workspace_id uuid NOT NULL,
    connector_id text NOT NULL,
    config_key text NOT NULL,
    tools jsonb NOT NULL,
    fetched_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (tenant_id, workspace_id, connector_id),
    FOREIGN KEY (tenant_id, workspace_id) REFERENCES workspaces (tenant_id, id)
);
SELECT gatehouse_scope_to_tenant('connector_catalogs');
GRANT SELECT, INSERT, UPDATE, DELETE ON connector_catalogs TO gatehouse_app;
