-- Approval policies bound to the exact call (issue 23, item 1). A workspace's configuration
-- names the writes that need a person's approval; such a call is not made but answered
-- `approval_required` with one of these rows. The row binds the call exactly: the caller, the
-- tool, the digest of its canonical arguments and the configuration version (the policy
-- version) it was asked under, and it expires (default 15 minutes).
--
-- state moves only forward, each step one compare-and-set on the state it read:
--   pending  -> approved | denied   (the first decision wins; never after expires_at)
--   approved -> used                (in the statement that starts the call: exactly once)
-- Expiry is implicit (now() >= expires_at): nothing runs when it passes.
CREATE TABLE approvals (
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    id uuid NOT NULL,
    workspace_id uuid NOT NULL,
    -- The caller: `token` or `oauth`, and the token's id; the token's person, if any.
    actor_kind text NOT NULL,
    actor_id text NOT NULL,
    member_id uuid,
    connector text NOT NULL,
    tool text NOT NULL,
    args_digest text NOT NULL CHECK (args_digest ~ '^sha256:[0-9a-f]{64}$'),
    policy_version integer NOT NULL,
    state text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'approved', 'denied', 'used')),
    requested_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    request_id text,
    decided_at timestamptz,
    decided_by text,
    reason text CHECK (length(reason) BETWEEN 1 AND 500),
    used_at timestamptz,
    PRIMARY KEY (tenant_id, id),
    FOREIGN KEY (tenant_id, workspace_id) REFERENCES workspaces (tenant_id, id),
    CONSTRAINT approvals_window CHECK (expires_at > requested_at),
    CONSTRAINT approvals_decided CHECK ((state = 'pending') = (decided_at IS NULL))
);
-- What approvers list: the pending requests, oldest first.
CREATE INDEX approvals_pending ON approvals (tenant_id, requested_at) WHERE state = 'pending';
-- The retry's lookup: a live approval of this caller for this exact call.
CREATE INDEX approvals_call ON approvals (tenant_id, workspace_id, actor_id, connector, tool, args_digest)
    WHERE state IN ('pending', 'approved');
SELECT gatehouse_scope_to_tenant('approvals');
GRANT SELECT, INSERT, UPDATE, DELETE ON approvals TO gatehouse_app;

-- Activity rows name the approval a call ran under.
ALTER TABLE activity ADD COLUMN approval_id uuid;

-- Approvers are members with this permission (owners and admins by default).
ALTER TABLE permission_overrides DROP CONSTRAINT permission_overrides_permission_check;
ALTER TABLE permission_overrides ADD CONSTRAINT permission_overrides_permission_check
    CHECK (permission IN ('connector_access', 'credential_administration', 'activity_access', 'access_token_management',
                          'approval_decision'));
