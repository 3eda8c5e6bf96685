-- Staff impersonation (issue 22 item 3): a platform admin acts inside a tenant only through
-- a grant of that tenant, with a reason and at most an hour, optionally approved by the
-- tenant first, revocable by the tenant at once. The grant is read on every request of the
-- staff person (no cache), so a revocation holds from the next request on every replica.
--
-- A grant's state is derived from its columns, never stored twice:
--   revoked   revoked_at is set (by the tenant, or the staff person ending it early);
--   pending   approval is needed and no decision was made yet (expires_at is null);
--   expired   now() >= expires_at;
--   active    otherwise. Expiry is implicit: nothing runs when it passes.
CREATE TABLE impersonations (
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    id uuid NOT NULL,
    staff_issuer text NOT NULL,
    staff_subject text NOT NULL,
    staff_email text NOT NULL,
    reason text NOT NULL CHECK (length(reason) BETWEEN 1 AND 500),
    minutes integer NOT NULL CHECK (minutes BETWEEN 1 AND 60),
    approval_required boolean NOT NULL,
    requested_at timestamptz NOT NULL DEFAULT now(),
    -- The first decision wins: approved (the grant's clock starts) or revoked.
    approved_at timestamptz,
    approved_by text,
    starts_at timestamptz,
    expires_at timestamptz,
    revoked_at timestamptz,
    revoked_by text,
    PRIMARY KEY (tenant_id, id),
    CONSTRAINT impersonations_window CHECK ((starts_at IS NULL) = (expires_at IS NULL) AND (expires_at IS NULL OR expires_at > starts_at))
);
-- The per-request lookup: the staff person's live grants in one tenant.
CREATE INDEX impersonations_staff ON impersonations (tenant_id, staff_issuer, staff_subject, expires_at)
    WHERE revoked_at IS NULL;
SELECT gatehouse_scope_to_tenant('impersonations');
GRANT SELECT, INSERT, UPDATE ON impersonations TO gatehouse_app;

-- The tenant's setting: whether a grant needs a tenant owner's or admin's approval before it
-- gives any access. No row: not needed (docs/decisions.md).
CREATE TABLE impersonation_settings (
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    approval_required boolean NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id)
);
SELECT gatehouse_scope_to_tenant('impersonation_settings');
GRANT SELECT, INSERT, UPDATE ON impersonation_settings TO gatehouse_app;
