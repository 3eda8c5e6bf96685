-- Operations (issue 8, parts 1, 2 and 4): what the platform could not do, and the issues those
-- failures group into.

-- Evidence: one row per failure. Platform failures (a lost activity batch) have a null tenant,
-- which a primary key column cannot hold, so like admin_log this table keys on its time-ordered
-- id (UUIDv7) and tenant_id leads its index instead. No foreign keys: evidence must never be
-- refused (tenants are never deleted, only marked reaped). Rows are written by the replica's
-- background writer in platform context and pruned there after 90 days, in bounded batches
-- served by ops_failures_retention.
CREATE TABLE ops_failures (
    id uuid PRIMARY KEY,
    tenant_id uuid,
    workspace_id uuid,
    operation text NOT NULL CHECK (length(operation) BETWEEN 1 AND 100),
    stage text NOT NULL CHECK (length(stage) BETWEEN 1 AND 100),
    status text NOT NULL DEFAULT 'failed' CHECK (status IN ('failed', 'refused', 'timed_out')),
    code text NOT NULL CHECK (length(code) BETWEEN 1 AND 100),
    message text NOT NULL CHECK (char_length(message) <= 2000),
    reference text,
    fingerprint text NOT NULL CHECK (fingerprint ~ '^[0-9a-f]{64}$'),
    at timestamptz NOT NULL
);
CREATE INDEX ops_failures_tenant_at ON ops_failures (tenant_id, at, id);
CREATE INDEX ops_failures_retention ON ops_failures (at);
ALTER TABLE ops_failures ENABLE ROW LEVEL SECURITY;
ALTER TABLE ops_failures FORCE ROW LEVEL SECURITY;
-- A tenant may read its own failures; platform rows (null tenant) only the platform context.
CREATE POLICY ops_failures_read ON ops_failures FOR SELECT
    USING (tenant_id = gatehouse_current_tenant() OR gatehouse_is_platform());
CREATE POLICY ops_failures_write ON ops_failures FOR INSERT WITH CHECK (gatehouse_is_platform());
CREATE POLICY ops_failures_prune ON ops_failures FOR DELETE USING (gatehouse_is_platform());
GRANT SELECT, INSERT, DELETE ON ops_failures TO gatehouse_app;

-- Issues: one row per fingerprint (SHA-256 of operation|stage|code, never the message),
-- upserted in the same statement that inserts the failures. Platform-wide: last_tenant_id is
-- a hint for the platform admin, not an owner, so the table has no tenant_id and only the
-- platform context reads or writes it. An issue outlives its pruned evidence and is deleted
-- 180 days after its last occurrence (ops_issues_retention).
CREATE TABLE ops_issues (
    fingerprint text PRIMARY KEY CHECK (fingerprint ~ '^[0-9a-f]{64}$'),
    operation text NOT NULL,
    stage text NOT NULL,
    code text NOT NULL,
    status text NOT NULL DEFAULT 'new' CHECK (status IN ('new', 'resolved', 'ignored', 'regressed')),
    seen bigint NOT NULL CHECK (seen > 0),
    first_seen timestamptz NOT NULL,
    last_seen timestamptz NOT NULL,
    last_message text NOT NULL,
    last_tenant_id uuid,
    resolved_version text,
    resolved_at timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ops_issues_retention ON ops_issues (last_seen);
ALTER TABLE ops_issues ENABLE ROW LEVEL SECURITY;
ALTER TABLE ops_issues FORCE ROW LEVEL SECURITY;
CREATE POLICY ops_issues_platform ON ops_issues USING (gatehouse_is_platform()) WITH CHECK (gatehouse_is_platform());
GRANT SELECT, INSERT, UPDATE, DELETE ON ops_issues TO gatehouse_app;
