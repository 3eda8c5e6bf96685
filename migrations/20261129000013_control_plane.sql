-- Control plane (issue 7): blueprints and their immutable versions, the workspace columns the
-- lifecycle, forks, erasure epochs and reap claims decide on, the copy ledger with leases,
-- erasure receipts, per-subject keys for sealed copies outside the database, tombstones of
-- reaped workspaces, peer bindings and membership fences.
--
-- Every rule on these rows is one serializable transaction whose conditional UPDATE decides;
-- the constraints and triggers below are the invariants the database itself keeps, so a bug in
-- a caller cannot break them either.

-- A tenant's named, versioned workspace configuration.
CREATE TABLE blueprints (
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    id uuid NOT NULL,
    slug text NOT NULL CHECK (slug ~ '^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$'),
    name text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    created_by text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id),
    CONSTRAINT blueprints_slug_key UNIQUE (tenant_id, slug)
);
SELECT gatehouse_scope_to_tenant('blueprints');
GRANT SELECT, INSERT ON blueprints TO gatehouse_app;

-- Immutable versions: the document and its digest never change; only the admission decision
-- moves, once, from pending to admitted or rejected (the trigger refuses anything else).
CREATE TABLE blueprint_versions (
    tenant_id uuid NOT NULL,
    blueprint_id uuid NOT NULL,
    version integer NOT NULL CHECK (version >= 1),
    document jsonb NOT NULL,
    digest text NOT NULL,
    admission text NOT NULL DEFAULT 'pending' CHECK (admission IN ('pending', 'admitted', 'rejected')),
    reason text CHECK (length(reason) <= 500),
    created_by text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    decided_by text,
    decided_at timestamptz,
    PRIMARY KEY (tenant_id, blueprint_id, version),
    FOREIGN KEY (tenant_id, blueprint_id) REFERENCES blueprints (tenant_id, id)
);
SELECT gatehouse_scope_to_tenant('blueprint_versions');
GRANT SELECT, INSERT, UPDATE (admission, reason, decided_by, decided_at) ON blueprint_versions TO gatehouse_app;

CREATE FUNCTION gatehouse_blueprint_version_immutable() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF OLD.admission <> 'pending' OR NEW.admission = 'pending'
       OR NEW.document IS DISTINCT FROM OLD.document OR NEW.digest IS DISTINCT FROM OLD.digest THEN
        RAISE EXCEPTION 'a blueprint version is immutable and decided once' USING ERRCODE = 'check_violation',
            CONSTRAINT = 'blueprint_versions_decided_once';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER blueprint_versions_immutable BEFORE UPDATE ON blueprint_versions
    FOR EACH ROW EXECUTE FUNCTION gatehouse_blueprint_version_immutable();

-- What the lifecycle, forks, erasure and reap decide on. `revision` (already present) is bumped
-- by every transition and bind; `erasure_epoch` only by a subject erasure; a workspace whose
-- `reap_claimed_at` is set accepts no new move and no bind.
ALTER TABLE workspaces
    ADD COLUMN blueprint_id uuid,
    ADD COLUMN blueprint_version integer,
    ADD COLUMN erasure_epoch bigint NOT NULL DEFAULT 0,
    ADD COLUMN fork_of uuid,
    ADD COLUMN expires_at timestamptz,
    ADD COLUMN pinned boolean NOT NULL DEFAULT false,
    ADD COLUMN reap_claimed_at timestamptz,
    ADD COLUMN reap_owner text,
    ADD CONSTRAINT workspaces_blueprint_version_fkey FOREIGN KEY (tenant_id, blueprint_id, blueprint_version)
        REFERENCES blueprint_versions (tenant_id, blueprint_id, version),
    ADD CONSTRAINT workspaces_fork_expiry CHECK (fork_of IS NOT NULL OR (expires_at IS NULL AND NOT pinned));
CREATE INDEX workspaces_blueprint ON workspaces (tenant_id, blueprint_id) WHERE blueprint_id IS NOT NULL;
CREATE INDEX workspaces_fork_expiry ON workspaces (expires_at) WHERE fork_of IS NOT NULL AND NOT pinned;

-- The copy ledger. A move (fork, snapshot export, snapshot restore, carry to a new version)
-- first records its rows as pending, each with a lease; its final step confirms them all in
-- one transaction with the workspace update, only if every row is still pending, unclaimed
-- and inside its lease. The recovery sweep claims pending rows whose lease has passed (sets
-- lease_owner: a claimed row can never be confirmed) and settles them.
--
--   workspace_id  the workspace whose state the move copies (every row of a move has it)
--   copy_ref      where the copy is: 'workspace:<uuid>' (live rows of a workspace, a fork's
--                 included) or 'snapshot:<file name>' (a sealed file in the snapshot directory)
--   role          source | destination
--   state         pending → eligible | retained | done; eligible → done; retained → done;
--                 done is terminal (the trigger refuses leaving it)
--   epoch_read    the workspace's erasure_epoch when the move recorded
CREATE TABLE copies (
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    move_id uuid NOT NULL,
    copy_ref text NOT NULL CHECK (copy_ref ~ '^(workspace|snapshot):[A-Za-z0-9._-]{1,200}$'),
    role text NOT NULL CHECK (role IN ('source', 'destination')),
    workspace_id uuid NOT NULL,
    kind text NOT NULL CHECK (kind IN ('fork', 'snapshot_export', 'snapshot_restore', 'carry')),
    state text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'eligible', 'retained', 'done')),
    epoch_read bigint NOT NULL,
    lease_until timestamptz NOT NULL,
    lease_owner text,
    created_at timestamptz NOT NULL DEFAULT now(),
    settled_at timestamptz,
    PRIMARY KEY (tenant_id, move_id, copy_ref, role)
);
CREATE INDEX copies_expired_leases ON copies (lease_until) WHERE state = 'pending';
CREATE INDEX copies_workspace ON copies (tenant_id, workspace_id, state);
CREATE INDEX copies_unsettled ON copies (state) WHERE state IN ('eligible', 'retained');
SELECT gatehouse_scope_to_tenant('copies');
GRANT SELECT, INSERT, UPDATE ON copies TO gatehouse_app;

CREATE FUNCTION gatehouse_copy_transition() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF OLD.state = 'done' AND NEW.state <> 'done' THEN
        RAISE EXCEPTION 'a settled copy is never reopened' USING ERRCODE = 'check_violation', CONSTRAINT = 'copies_done_terminal';
    END IF;
    IF OLD.state <> 'pending' AND NEW.state = 'pending' THEN
        RAISE EXCEPTION 'a copy never returns to pending' USING ERRCODE = 'check_violation', CONSTRAINT = 'copies_no_reopen';
    END IF;
    IF NEW.move_id <> OLD.move_id OR NEW.copy_ref <> OLD.copy_ref OR NEW.role <> OLD.role
       OR NEW.workspace_id <> OLD.workspace_id OR NEW.epoch_read <> OLD.epoch_read THEN
        RAISE EXCEPTION 'a copy row''s identity is immutable' USING ERRCODE = 'check_violation', CONSTRAINT = 'copies_identity';
    END IF;
    IF OLD.lease_owner IS NOT NULL AND NEW.lease_owner IS DISTINCT FROM OLD.lease_owner THEN
        RAISE EXCEPTION 'a claimed copy stays claimed by its claimant' USING ERRCODE = 'check_violation', CONSTRAINT = 'copies_claim_once';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER copies_transition BEFORE UPDATE ON copies FOR EACH ROW EXECUTE FUNCTION gatehouse_copy_transition();

-- Per-subject data keys for copies that leave the database (snapshot files): a subject's part of
-- a snapshot is sealed under its own key, and an erasure destroys the key (envelope set to null)
-- so those sealed parts become unreadable wherever they are. The key itself is sealed by the
-- vault's key ring with the tenant and subject as associated data.
CREATE TABLE subject_keys (
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    subject text NOT NULL CHECK (length(subject) BETWEEN 1 AND 512),
    key_id text,
    envelope text,
    created_at timestamptz NOT NULL DEFAULT now(),
    destroyed_at timestamptz,
    PRIMARY KEY (tenant_id, subject),
    CONSTRAINT subject_keys_destroyed CHECK ((destroyed_at IS NULL) = (envelope IS NOT NULL))
);
SELECT gatehouse_scope_to_tenant('subject_keys');
GRANT SELECT, INSERT, UPDATE ON subject_keys TO gatehouse_app;

-- One receipt per completed erasure: what was redacted, counted per kind.
CREATE TABLE erasure_receipts (
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    id uuid NOT NULL,
    workspace_id uuid NOT NULL,
    subject_digest text NOT NULL,
    epoch bigint NOT NULL,
    counts jsonb NOT NULL,
    erased_by text NOT NULL,
    erased_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id)
);
SELECT gatehouse_scope_to_tenant('erasure_receipts');
GRANT SELECT, INSERT ON erasure_receipts TO gatehouse_app;

-- A reaped workspace leaves only this: its id, its former slug (released for reuse) and when.
CREATE TABLE workspace_tombstones (
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    workspace_id uuid NOT NULL,
    slug text NOT NULL,
    reaped_by text NOT NULL,
    reaped_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, workspace_id)
);
SELECT gatehouse_scope_to_tenant('workspace_tombstones');
GRANT SELECT, INSERT ON workspace_tombstones TO gatehouse_app;

-- An explicit peer binding: the peer connector `connector_id` of `workspace_id` calls
-- `target_workspace_id`. Invalidated (never deleted silently) when the target is archived,
-- reaped or deleted; a call through an invalidated binding answers `bound_unavailable`.
CREATE TABLE peer_bindings (
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    workspace_id uuid NOT NULL,
    connector_id text NOT NULL,
    target_workspace_id uuid NOT NULL,
    created_by text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    invalidated_at timestamptz,
    invalidated_reason text,
    PRIMARY KEY (tenant_id, workspace_id, connector_id)
);
CREATE INDEX peer_bindings_target ON peer_bindings (tenant_id, target_workspace_id) WHERE invalidated_at IS NULL;
SELECT gatehouse_scope_to_tenant('peer_bindings');
GRANT SELECT, INSERT, UPDATE, DELETE ON peer_bindings TO gatehouse_app;

-- Membership fences: removing a member raises the fence of its principal (only ever raised);
-- accepting an invitation whose request started before the latest removal is refused.
CREATE TABLE member_fences (
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    issuer text NOT NULL,
    subject text NOT NULL,
    raised_at timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, issuer, subject)
);
SELECT gatehouse_scope_to_tenant('member_fences');
GRANT SELECT, INSERT, UPDATE ON member_fences TO gatehouse_app;

CREATE FUNCTION gatehouse_fence_only_rises() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF NEW.raised_at < OLD.raised_at THEN
        RAISE EXCEPTION 'a membership fence is only ever raised' USING ERRCODE = 'check_violation', CONSTRAINT = 'member_fences_rise';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER member_fences_rise BEFORE UPDATE ON member_fences FOR EACH ROW EXECUTE FUNCTION gatehouse_fence_only_rises();

-- Peer bindings change what a workspace serves, so they bump the tenant's epoch like the rest.
CREATE TRIGGER peer_bindings_epoch AFTER INSERT OR UPDATE OR DELETE
    ON peer_bindings FOR EACH ROW EXECUTE FUNCTION gatehouse_bump_epoch();
