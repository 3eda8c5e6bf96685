-- Workspaces and their versioned configuration. A workspace always runs exactly one immutable
-- configuration version; an edit writes the next version of the workspace's own lineage and
-- binds it by compare-and-set on the version the editor read (ARCHITECTURE §7).

CREATE TABLE workspaces (
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    id uuid NOT NULL,
    slug text NOT NULL CHECK (slug ~ '^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$'),
    name text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    status text NOT NULL DEFAULT 'active'
        CHECK (status IN ('provisioning', 'active', 'suspended', 'archived', 'reaped')),
    bound_version integer NOT NULL,
    revision bigint NOT NULL DEFAULT 1,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id),
    CONSTRAINT workspaces_slug_key UNIQUE (tenant_id, slug)
);
SELECT gatehouse_scope_to_tenant('workspaces');
GRANT SELECT, INSERT, UPDATE ON workspaces TO gatehouse_app;

-- Immutable: the application may insert and read versions, never change them.
CREATE TABLE workspace_versions (
    tenant_id uuid NOT NULL,
    workspace_id uuid NOT NULL,
    version integer NOT NULL CHECK (version >= 1),
    document jsonb NOT NULL,
    digest text NOT NULL,
    created_by text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, workspace_id, version),
    FOREIGN KEY (tenant_id, workspace_id) REFERENCES workspaces (tenant_id, id)
);
SELECT gatehouse_scope_to_tenant('workspace_versions');
GRANT SELECT, INSERT ON workspace_versions TO gatehouse_app;

-- One payload-free row per tool call, written off the request path in batches, keyset-paged on
-- (occurred_at, id) and pruned on write after the retention window.
CREATE TABLE activity (
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    occurred_at timestamptz NOT NULL,
    id uuid NOT NULL,
    workspace_id uuid NOT NULL,
    request_id text,
    actor_kind text NOT NULL,
    actor_id text NOT NULL,
    connector text,
    tool text NOT NULL,
    source text NOT NULL,
    outcome text NOT NULL CHECK (outcome IN ('ok', 'error')),
    duration_ms integer NOT NULL,
    error_code text,
    classification text,
    result_bytes integer NOT NULL DEFAULT 0,
    client_name text,
    client_version text,
    pool text,
    PRIMARY KEY (tenant_id, occurred_at, id)
);
CREATE INDEX activity_retention ON activity (occurred_at);
SELECT gatehouse_scope_to_tenant('activity');
GRANT SELECT, INSERT, DELETE ON activity TO gatehouse_app;

-- Results over the inline cap, kept for 15 minutes and read back in pages by the caller who
-- made the call (grants re-checked on every page). At most 64 per tenant; pruned on write.
CREATE TABLE result_stash (
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    id uuid NOT NULL,
    workspace_id uuid NOT NULL,
    actor_id text NOT NULL,
    address text NOT NULL,
    body text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, id)
);
CREATE INDEX result_stash_age ON result_stash (tenant_id, created_at);
SELECT gatehouse_scope_to_tenant('result_stash');
GRANT SELECT, INSERT, DELETE ON result_stash TO gatehouse_app;
