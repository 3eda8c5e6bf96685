-- Moving a tenant between deployments (issue 26): export, import, verify and seal.
--
-- A sealed source tenant is `moved`: every request to it answers `tenant_moved` with the base
-- URL recorded here, and nothing writes to it. The destination records the export it imported
-- once, so the same file never imports twice (even after the tenant's slug changed there).
ALTER TABLE tenants DROP CONSTRAINT tenants_status_check;
ALTER TABLE tenants ADD CONSTRAINT tenants_status_check
    CHECK (status IN ('active', 'suspended', 'deleting', 'reaped', 'moved'));

-- One row per step a deployment took in a move of the tenant:
--   direction 'in'  — this deployment imported export `export_id` (at most once per export);
--   direction 'out' — this deployment sealed the tenant as moved to `base_url`; `prior_status`
--                     is what an unseal restores, `unsealed_at` set when that happened.
-- Deployment-local: never exported itself (docs/decisions.md, "Tenant export").
CREATE TABLE tenant_moves (
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    id uuid NOT NULL,
    direction text NOT NULL CHECK (direction IN ('in', 'out')),
    export_id uuid NOT NULL,
    manifest_digest text NOT NULL CHECK (manifest_digest ~ '^[0-9a-f]{64}$'),
    base_url text CHECK (length(base_url) BETWEEN 1 AND 2000),
    prior_status text CHECK (prior_status IN ('active', 'suspended')),
    at timestamptz NOT NULL DEFAULT now(),
    unsealed_at timestamptz,
    PRIMARY KEY (tenant_id, id),
    CONSTRAINT tenant_moves_out_check CHECK ((direction = 'out') = (base_url IS NOT NULL AND prior_status IS NOT NULL)),
    CONSTRAINT tenant_moves_unseal_check CHECK (unsealed_at IS NULL OR direction = 'out')
);
CREATE UNIQUE INDEX tenant_moves_import_once ON tenant_moves (export_id) WHERE direction = 'in';
CREATE UNIQUE INDEX tenant_moves_one_seal ON tenant_moves (tenant_id) WHERE direction = 'out' AND unsealed_at IS NULL;
SELECT gatehouse_scope_to_tenant('tenant_moves');
GRANT SELECT, INSERT, UPDATE ON tenant_moves TO gatehouse_app;
