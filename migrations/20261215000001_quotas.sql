-- Durable quotas and rate limits (issue 23 item 2).
--
-- A limit names whose calls it counts (`per`: the tenant as a whole, each token, or each
-- member), which calls (a connector, one of its tools, reads or writes or both), and up to
-- three budgets: `requests` per `window_seconds`, `concurrency` calls in flight, and a
-- `daily` budget (UTC days). `version` is the compare-and-set token of every edit; a change
-- moves the tenant's epoch, so every replica applies it on its next call.
CREATE TABLE quota_limits (
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    id uuid NOT NULL,
    name text NOT NULL CHECK (name ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    per text NOT NULL CHECK (per IN ('tenant', 'token', 'member')),
    connector text,
    tool text,
    class text NOT NULL CHECK (class IN ('read', 'write', 'any')),
    requests integer CHECK (requests > 0),
    window_seconds integer CHECK (window_seconds BETWEEN 1 AND 86400),
    concurrency integer CHECK (concurrency > 0),
    daily integer CHECK (daily > 0),
    fail_open boolean NOT NULL DEFAULT false,
    version bigint NOT NULL DEFAULT 1,
    created_by text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id),
    CONSTRAINT quota_limits_name_key UNIQUE (tenant_id, name),
    CHECK ((requests IS NULL) = (window_seconds IS NULL)),
    CHECK (requests IS NOT NULL OR concurrency IS NOT NULL OR daily IS NOT NULL),
    CHECK (tool IS NULL OR connector IS NOT NULL)
);
SELECT gatehouse_scope_to_tenant('quota_limits');
GRANT SELECT, INSERT, UPDATE, DELETE ON quota_limits TO gatehouse_app;
CREATE TRIGGER quota_limits_epoch AFTER INSERT OR UPDATE OR DELETE
    ON quota_limits FOR EACH ROW EXECUTE FUNCTION gatehouse_bump_epoch();

-- The budget ledger: one row per limit, subject and fixed window (`span_ms` long, numbered
-- from the Unix epoch on the database's clock; a daily budget's window is one UTC day).
-- Replicas lease slices of `budget`: `granted` is what they hold or have spent, never more
-- than `budget`; a replica returns what it did not use (`granted` goes down) and reports
-- what it admitted (`used`). A replica that dies loses at most its unreturned slice.
CREATE TABLE quota_windows (
    tenant_id uuid NOT NULL,
    limit_id uuid NOT NULL,
    subject text NOT NULL,
    kind text NOT NULL CHECK (kind IN ('rate', 'daily')),
    span_ms bigint NOT NULL CHECK (span_ms > 0),
    window_no bigint NOT NULL,
    budget integer NOT NULL CHECK (budget > 0),
    granted integer NOT NULL CHECK (granted >= 0),
    used integer NOT NULL DEFAULT 0 CHECK (used >= 0),
    refused integer NOT NULL DEFAULT 0 CHECK (refused >= 0),
    -- What the last lease granted (the statement that leases returns it).
    last_slice integer NOT NULL DEFAULT 0,
    CHECK (granted <= budget),
    PRIMARY KEY (tenant_id, limit_id, subject, kind, window_no),
    FOREIGN KEY (tenant_id, limit_id) REFERENCES quota_limits (tenant_id, id) ON DELETE CASCADE
);
SELECT gatehouse_scope_to_tenant('quota_windows');
GRANT SELECT, INSERT, UPDATE, DELETE ON quota_windows TO gatehouse_app;

-- Concurrency slots leased by replicas: the live (unexpired) slots of a limit and subject
-- never add up to more than its `concurrency`. A replica renews its slots while it runs; a
-- dead replica's slots lapse at `expires_at`.
CREATE TABLE quota_slots (
    tenant_id uuid NOT NULL,
    limit_id uuid NOT NULL,
    subject text NOT NULL,
    replica_id uuid NOT NULL,
    held integer NOT NULL CHECK (held >= 0),
    expires_at timestamptz NOT NULL,
    -- The replica's own sequence number of its decisions: a late write of an older one (whose
    -- answer the replica stopped waiting for) never overwrites a newer one.
    seq bigint NOT NULL,
    PRIMARY KEY (tenant_id, limit_id, subject, replica_id),
    FOREIGN KEY (tenant_id, limit_id) REFERENCES quota_limits (tenant_id, id) ON DELETE CASCADE
);
SELECT gatehouse_scope_to_tenant('quota_slots');
GRANT SELECT, INSERT, UPDATE, DELETE ON quota_slots TO gatehouse_app;

-- The limit that refused a call, in its activity row.
ALTER TABLE activity ADD COLUMN quota text;

-- The report of the ledger: per limit, subject and window (the last 7 days), the budget, what
-- replicas hold or spent, the calls they admitted and refused. Same shape as the reports
-- migration: a SECURITY DEFINER function scoped by the reader, behind a view in `report`.
CREATE FUNCTION gatehouse_report_quota_usage()
    RETURNS TABLE (tenant_id uuid, tenant text, quota text, subject text, kind text, window_start timestamptz,
                   window_seconds bigint, budget integer, granted integer, used integer, refused integer)
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
    AS $$
#variable_conflict use_column
DECLARE s record; was text := current_setting('gatehouse.platform', true);
BEGIN
    SELECT * INTO s FROM gatehouse_report_scope();
    RETURN QUERY
    SELECT w.tenant_id, t.slug, l.name, w.subject, w.kind, to_timestamp(w.window_no * w.span_ms / 1000.0),
           w.span_ms / 1000, w.budget, w.granted, w.used, w.refused
    FROM quota_windows w JOIN tenants t ON t.id = w.tenant_id
    JOIN quota_limits l ON l.tenant_id = w.tenant_id AND l.id = w.limit_id
    WHERE (s.platform OR w.tenant_id = s.tenant)
      AND to_timestamp((w.window_no + 1) * w.span_ms / 1000.0) > now() - interval '7 days'
    ORDER BY 2, 6 DESC, 3, 4, 5;
    PERFORM set_config('gatehouse.platform', coalesce(was, ''), true);
END
$$;
REVOKE ALL ON FUNCTION gatehouse_report_quota_usage() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION gatehouse_report_quota_usage() TO gatehouse_report, gatehouse_app;
CREATE VIEW report.quota_usage AS SELECT * FROM gatehouse_report_quota_usage();
GRANT SELECT ON report.quota_usage TO gatehouse_report, gatehouse_app;
COMMENT ON VIEW report.quota_usage IS 'Quota ledger per limit, subject and window (last 7 days): budget, granted to replicas, calls admitted and refused.';
