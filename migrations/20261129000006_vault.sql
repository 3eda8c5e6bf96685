-- Credential slots sealed by the vault (AES-256-GCM; the keys live only in the environment).
-- One row per (workspace, connector, owner): `shared`, or `member:<id>` for a member's own
-- credential, which goes with the membership. `envelope` is `v1.<kid>.<nonce>.<ciphertext>`
-- whose associated data binds tenant, workspace, connector, owner and purpose; `key_id`
-- repeats its kid so rotation finds rows under older keys by index. `fields` is metadata
-- only: field names and the last four characters of long values, never a value.
CREATE TABLE credentials (
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    workspace_id uuid NOT NULL,
    connector_id text NOT NULL,
    owner text NOT NULL,
    member_id uuid,
    key_id text NOT NULL,
    envelope text NOT NULL,
    fields jsonb NOT NULL,
    version bigint NOT NULL DEFAULT 1,
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_by text NOT NULL,
    PRIMARY KEY (tenant_id, workspace_id, connector_id, owner),
    FOREIGN KEY (tenant_id, workspace_id) REFERENCES workspaces (tenant_id, id),
    CONSTRAINT credentials_member_fkey FOREIGN KEY (tenant_id, member_id) REFERENCES members (tenant_id, id) ON DELETE CASCADE,
    CONSTRAINT credentials_owner_check CHECK (
        (owner = 'shared' AND member_id IS NULL) OR (owner = 'member:' || member_id::text)
    )
);
-- Rotation walks the rows of one older key in key order, in bounded batches.
CREATE INDEX credentials_rotation ON credentials (key_id, tenant_id, workspace_id, connector_id, owner);
SELECT gatehouse_scope_to_tenant('credentials');
GRANT SELECT, INSERT, UPDATE, DELETE ON credentials TO gatehouse_app;

-- A set, replaced, re-sealed or removed credential bumps the tenant's epoch, so every replica
-- reads the slot again on its next call (a replacement takes effect at once, everywhere).
CREATE TRIGGER credentials_epoch AFTER INSERT OR UPDATE OR DELETE
    ON credentials FOR EACH ROW EXECUTE FUNCTION gatehouse_bump_epoch();
