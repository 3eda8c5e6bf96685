-- The console's activity dashboard per workspace (issue 24 item 2): the newest calls of one
-- workspace in a time range, found without reading the tenant's other workspaces. The
-- tenant-wide dashboard reads the primary key (tenant_id, occurred_at, id).
CREATE INDEX activity_workspace_time ON activity (tenant_id, workspace_id, occurred_at);
