-- Operations, continued (issue 8, parts 3 and 5): a tenant's findings and suppress rules, and
-- the `report` schema of read-only views with the roles that may read them.

-- Findings: a tenant's own inbox, one row per (tenant, kind, subject). `recurring` findings
-- are upserted by the ops writer in the transaction that records the tenant's failures
-- (subject = the fingerprint); `drift` when a connector's catalog changes (subject =
-- workspace id/connector id); `invariant` for a failed scheduled check. `operation` and `code`
-- are what suppress rules match besides kind and subject.
CREATE TABLE ops_findings (
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    id uuid NOT NULL,
    kind text NOT NULL CHECK (kind IN ('recurring', 'invariant', 'drift')),
    subject text NOT NULL CHECK (length(subject) BETWEEN 1 AND 300),
    operation text NOT NULL CHECK (length(operation) BETWEEN 1 AND 100),
    code text NOT NULL CHECK (length(code) BETWEEN 1 AND 100),
    status text NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'acked', 'resolved', 'suppressed')),
    regressed boolean NOT NULL DEFAULT false,
    occurrences bigint NOT NULL CHECK (occurrences > 0),
    first_seen timestamptz NOT NULL,
    last_seen timestamptz NOT NULL,
    last_message text NOT NULL CHECK (char_length(last_message) <= 2000),
    suppressed_by uuid,
    resolved_at timestamptz,
    -- `manual` (a member resolved it) or `stale` (quiet for 180 days).
    resolution text CHECK (resolution IN ('manual', 'stale')),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id),
    CONSTRAINT ops_findings_subject_key UNIQUE (tenant_id, kind, subject)
);
-- The stale sweep walks unresolved findings by last occurrence, oldest first, in bounded batches.
CREATE INDEX ops_findings_quiet ON ops_findings (last_seen) WHERE status <> 'resolved';
SELECT gatehouse_scope_to_tenant('ops_findings');
GRANT SELECT, INSERT, UPDATE ON ops_findings TO gatehouse_app;

-- Suppress rules: any of kind, operation, code, subject (at least one); a reason; an expiry
-- in the future and at most 90 days after creation (the code checks it on the database clock,
-- the constraint keeps it true). Revoked rules stay as history.
CREATE TABLE ops_suppress_rules (
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    id uuid NOT NULL,
    kind text CHECK (kind IN ('recurring', 'invariant', 'drift')),
    operation text CHECK (length(operation) BETWEEN 1 AND 100),
    code text CHECK (length(code) BETWEEN 1 AND 100),
    subject text CHECK (length(subject) BETWEEN 1 AND 300),
    reason text NOT NULL CHECK (char_length(reason) BETWEEN 1 AND 500),
    expires_at timestamptz NOT NULL,
    created_by text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz,
    revoked_by text,
    PRIMARY KEY (tenant_id, id),
    CONSTRAINT ops_suppress_rules_matches CHECK (num_nonnulls(kind, operation, code, subject) >= 1),
    CONSTRAINT ops_suppress_rules_expiry CHECK (expires_at > created_at AND expires_at <= created_at + interval '90 days')
);
CREATE INDEX ops_suppress_rules_live ON ops_suppress_rules (tenant_id, expires_at) WHERE revoked_at IS NULL;
SELECT gatehouse_scope_to_tenant('ops_suppress_rules');
GRANT SELECT, INSERT, UPDATE ON ops_suppress_rules TO gatehouse_app;

-- ---------------------------------------------------------------------------------------------
-- Reports (part 5).
--
-- Roles, cluster-wide (several databases of one cluster may migrate at once, hence the
-- exception handlers, as in the foundation):
--   gatehouse_report           NOLOGIN group: USAGE on schema `report`, SELECT on its views,
--                              nothing else. A login granted it sees ONE tenant's rows: the
--                              tenant named for it in `report_viewers` (none: no rows).
--   gatehouse_report_platform  NOLOGIN group, member of gatehouse_report: a login granted it
--                              sees every tenant's rows.
-- The scope is decided from `session_user` (the login, which SET ROLE cannot change) and the
-- two tables/roles above, never from a setting the connected role could change itself. The
-- application (any login that is a member of gatehouse_app) keeps its own context instead:
-- the transaction's tenant, or the platform.
DO $$
BEGIN
    BEGIN
        CREATE ROLE gatehouse_report NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
    END;
    BEGIN
        CREATE ROLE gatehouse_report_platform NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
    END;
    IF NOT pg_has_role('gatehouse_report_platform', 'gatehouse_report', 'MEMBER') THEN
        BEGIN
            GRANT gatehouse_report TO gatehouse_report_platform;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
        END;
    END IF;
END
$$;

-- Which tenant a report login sees. Managed by the schema owner (README: "SQL reports").
CREATE TABLE report_viewers (
    tenant_id uuid NOT NULL REFERENCES tenants (id),
    role_name text NOT NULL CONSTRAINT report_viewers_role_key UNIQUE,
    granted_by text NOT NULL,
    granted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, role_name)
);
SELECT gatehouse_scope_to_tenant('report_viewers');
GRANT SELECT ON report_viewers TO gatehouse_app;

CREATE SCHEMA report;
COMMENT ON SCHEMA report IS 'Gatehouse SQL reports: read-only views, scoped to one tenant unless the reader is granted platform-wide access. No view exposes a secret (token hashes, secret hashes, sealed credentials).';
GRANT USAGE ON SCHEMA report TO gatehouse_report, gatehouse_app;

-- The reader's scope, then the platform context switched on for the report's own reads (the
-- caller restores it). Called only from the report functions below, which run as the owner.
CREATE FUNCTION gatehouse_report_scope(OUT platform boolean, OUT tenant uuid)
    LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, public
    AS $$
BEGIN
    IF pg_has_role(session_user, 'gatehouse_app', 'MEMBER') THEN
        platform := gatehouse_is_platform();
        tenant := gatehouse_current_tenant();
        PERFORM set_config('gatehouse.platform', 'on', true);
    ELSE
        platform := pg_has_role(session_user, 'gatehouse_report_platform', 'MEMBER');
        PERFORM set_config('gatehouse.platform', 'on', true);
        SELECT v.tenant_id INTO tenant FROM report_viewers v WHERE v.role_name = session_user::text;
    END IF;
END
$$;
REVOKE ALL ON FUNCTION gatehouse_report_scope() FROM PUBLIC;

-- Each report is a SECURITY DEFINER function (it reads base tables the reader may not) behind a
-- view. The function filters on the scope itself, then restores the caller's platform setting.
CREATE FUNCTION gatehouse_report_token_inventory()
    RETURNS TABLE (tenant_id uuid, tenant text, kind text, id uuid, label text, name text, created_by text,
                   created_at timestamptz, last_used_at timestamptz, revoked_at timestamptz, state text,
                   idle_days integer, stale boolean)
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
    AS $$
#variable_conflict use_column
DECLARE s record; was text := current_setting('gatehouse.platform', true);
BEGIN
    SELECT * INTO s FROM gatehouse_report_scope();
    RETURN QUERY
    WITH creds AS (
        SELECT a.tenant_id, 'access_token'::text AS kind, a.id, a.prefix AS label, a.name, a.created_by, a.created_at,
               a.last_used_at, a.revoked_at FROM access_tokens a
        UNION ALL
        SELECT c.tenant_id, 'service_credential', c.id, c.client_id, c.name, c.created_by, c.created_at,
               c.last_used_at, c.revoked_at FROM service_credentials c)
    SELECT c.tenant_id, t.slug, c.kind, c.id, c.label, c.name, c.created_by, c.created_at, c.last_used_at, c.revoked_at,
           CASE WHEN c.revoked_at IS NULL THEN 'live' ELSE 'revoked' END,
           floor(extract(epoch FROM now() - coalesce(c.last_used_at, c.created_at)) / 86400)::integer,
           c.revoked_at IS NULL AND coalesce(c.last_used_at, c.created_at) < now() - interval '90 days'
    FROM creds c JOIN tenants t ON t.id = c.tenant_id
    WHERE s.platform OR c.tenant_id = s.tenant
    ORDER BY t.slug, c.kind, c.created_at, c.id;
    PERFORM set_config('gatehouse.platform', coalesce(was, ''), true);
END
$$;

CREATE FUNCTION gatehouse_report_connector_activity_daily()
    RETURNS TABLE (tenant_id uuid, tenant text, workspace text, connector text, day date, calls bigint, errors bigint,
                   error_rate numeric, p95_ms double precision, max_ms integer)
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
    AS $$
#variable_conflict use_column
DECLARE s record; was text := current_setting('gatehouse.platform', true);
BEGIN
    SELECT * INTO s FROM gatehouse_report_scope();
    RETURN QUERY
    SELECT a.tenant_id, t.slug, w.slug, coalesce(a.connector, '(gateway)'), (a.occurred_at AT TIME ZONE 'UTC')::date,
           count(*), count(*) FILTER (WHERE a.outcome = 'error'),
           round(count(*) FILTER (WHERE a.outcome = 'error')::numeric / count(*), 4),
           percentile_cont(0.95) WITHIN GROUP (ORDER BY a.duration_ms), max(a.duration_ms)
    FROM activity a JOIN tenants t ON t.id = a.tenant_id
    LEFT JOIN workspaces w ON w.tenant_id = a.tenant_id AND w.id = a.workspace_id
    WHERE s.platform OR a.tenant_id = s.tenant
    GROUP BY a.tenant_id, t.slug, w.slug, coalesce(a.connector, '(gateway)'), (a.occurred_at AT TIME ZONE 'UTC')::date
    ORDER BY 5 DESC, 2, 3, 4;
    PERFORM set_config('gatehouse.platform', coalesce(was, ''), true);
END
$$;

CREATE FUNCTION gatehouse_report_failing_connectors()
    RETURNS TABLE (tenant_id uuid, tenant text, workspace text, connector text, calls bigint, errors bigint,
                   error_rate numeric, last_error_at timestamptz, last_error_code text)
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
    AS $$
#variable_conflict use_column
DECLARE s record; was text := current_setting('gatehouse.platform', true);
BEGIN
    SELECT * INTO s FROM gatehouse_report_scope();
    RETURN QUERY
    SELECT a.tenant_id, t.slug, w.slug, a.connector, count(*), count(*) FILTER (WHERE a.outcome = 'error'),
           round(count(*) FILTER (WHERE a.outcome = 'error')::numeric / count(*), 4),
           max(a.occurred_at) FILTER (WHERE a.outcome = 'error'),
           (array_agg(a.error_code ORDER BY a.occurred_at DESC) FILTER (WHERE a.outcome = 'error'))[1]
    FROM activity a JOIN tenants t ON t.id = a.tenant_id
    LEFT JOIN workspaces w ON w.tenant_id = a.tenant_id AND w.id = a.workspace_id
    WHERE (s.platform OR a.tenant_id = s.tenant) AND a.connector IS NOT NULL
      AND a.occurred_at > now() - interval '24 hours'
    GROUP BY a.tenant_id, t.slug, w.slug, a.connector
    HAVING count(*) FILTER (WHERE a.outcome = 'error') > 0
    ORDER BY 7 DESC, 6 DESC, 2, 3, 4;
    PERFORM set_config('gatehouse.platform', coalesce(was, ''), true);
END
$$;

CREATE FUNCTION gatehouse_report_open_issues()
    RETURNS TABLE (fingerprint text, operation text, stage text, code text, status text, seen bigint,
                   first_seen timestamptz, last_seen timestamptz, last_tenant text, last_message text)
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
    AS $$
#variable_conflict use_column
DECLARE s record; was text := current_setting('gatehouse.platform', true);
BEGIN
    SELECT * INTO s FROM gatehouse_report_scope();
    -- Issues are platform-wide (one per fingerprint across tenants): platform readers only.
    RETURN QUERY
    SELECT i.fingerprint, i.operation, i.stage, i.code, i.status, i.seen, i.first_seen, i.last_seen, t.slug, i.last_message
    FROM ops_issues i LEFT JOIN tenants t ON t.id = i.last_tenant_id
    WHERE s.platform AND i.status IN ('new', 'regressed')
    ORDER BY i.last_seen DESC;
    PERFORM set_config('gatehouse.platform', coalesce(was, ''), true);
END
$$;

CREATE FUNCTION gatehouse_report_open_findings()
    RETURNS TABLE (tenant_id uuid, tenant text, id uuid, kind text, subject text, operation text, code text, status text,
                   regressed boolean, occurrences bigint, first_seen timestamptz, last_seen timestamptz, last_message text)
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
    AS $$
#variable_conflict use_column
DECLARE s record; was text := current_setting('gatehouse.platform', true);
BEGIN
    SELECT * INTO s FROM gatehouse_report_scope();
    RETURN QUERY
    SELECT f.tenant_id, t.slug, f.id, f.kind, f.subject, f.operation, f.code, f.status, f.regressed, f.occurrences,
           f.first_seen, f.last_seen, f.last_message
    FROM ops_findings f JOIN tenants t ON t.id = f.tenant_id
    WHERE (s.platform OR f.tenant_id = s.tenant) AND f.status IN ('open', 'acked')
    ORDER BY f.last_seen DESC;
    PERFORM set_config('gatehouse.platform', coalesce(was, ''), true);
END
$$;

CREATE FUNCTION gatehouse_report_audit_by_actor()
    RETURNS TABLE (tenant_id uuid, tenant text, actor text, action text, changes bigint, first_at timestamptz,
                   last_at timestamptz)
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
    AS $$
#variable_conflict use_column
DECLARE s record; was text := current_setting('gatehouse.platform', true);
BEGIN
    SELECT * INTO s FROM gatehouse_report_scope();
    -- Counts only: before/after and targets stay in the admin log itself.
    RETURN QUERY
    SELECT l.tenant_id, t.slug, l.actor, l.action, count(*), min(l.at), max(l.at)
    FROM admin_log l LEFT JOIN tenants t ON t.id = l.tenant_id
    WHERE s.platform OR l.tenant_id = s.tenant
    GROUP BY l.tenant_id, t.slug, l.actor, l.action
    ORDER BY 2 NULLS FIRST, 3, 4;
    PERFORM set_config('gatehouse.platform', coalesce(was, ''), true);
END
$$;

CREATE FUNCTION gatehouse_report_tenant_usage()
    RETURNS TABLE (tenant_id uuid, tenant text, status text, members bigint, workspaces bigint, live_tokens bigint,
                   live_service_credentials bigint, stored_credentials bigint, calls_30d bigint, errors_30d bigint,
                   failures_30d bigint, open_findings bigint, last_call_at timestamptz)
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
    AS $$
#variable_conflict use_column
DECLARE s record; was text := current_setting('gatehouse.platform', true);
BEGIN
    SELECT * INTO s FROM gatehouse_report_scope();
    RETURN QUERY
    SELECT t.id, t.slug, t.status,
           (SELECT count(*) FROM members m WHERE m.tenant_id = t.id),
           (SELECT count(*) FROM workspaces w WHERE w.tenant_id = t.id AND w.status <> 'reaped'),
           (SELECT count(*) FROM access_tokens a WHERE a.tenant_id = t.id AND a.revoked_at IS NULL),
           (SELECT count(*) FROM service_credentials c WHERE c.tenant_id = t.id AND c.revoked_at IS NULL),
           (SELECT count(*) FROM credentials v WHERE v.tenant_id = t.id),
           (SELECT count(*) FROM activity a WHERE a.tenant_id = t.id AND a.occurred_at > now() - interval '30 days'),
           (SELECT count(*) FROM activity a WHERE a.tenant_id = t.id AND a.occurred_at > now() - interval '30 days'
                AND a.outcome = 'error'),
           (SELECT count(*) FROM ops_failures f WHERE f.tenant_id = t.id AND f.at > now() - interval '30 days'),
           (SELECT count(*) FROM ops_findings f WHERE f.tenant_id = t.id AND f.status IN ('open', 'acked')),
           (SELECT max(a.occurred_at) FROM activity a WHERE a.tenant_id = t.id)
    FROM tenants t
    WHERE s.platform OR t.id = s.tenant
    ORDER BY t.slug;
    PERFORM set_config('gatehouse.platform', coalesce(was, ''), true);
END
$$;

DO $$
DECLARE f text;
BEGIN
    FOREACH f IN ARRAY ARRAY['token_inventory', 'connector_activity_daily', 'failing_connectors', 'open_issues',
                             'open_findings', 'audit_by_actor', 'tenant_usage'] LOOP
        EXECUTE format('REVOKE ALL ON FUNCTION gatehouse_report_%s() FROM PUBLIC', f);
        EXECUTE format('GRANT EXECUTE ON FUNCTION gatehouse_report_%s() TO gatehouse_report, gatehouse_app', f);
        EXECUTE format('CREATE VIEW report.%I AS SELECT * FROM gatehouse_report_%s()', f, f);
        EXECUTE format('GRANT SELECT ON report.%I TO gatehouse_report, gatehouse_app', f);
    END LOOP;
END
$$;

-- Each comment is what `gatehouse report --list` prints after the name.
COMMENT ON VIEW report.token_inventory IS 'Access tokens and service credentials: prefix or client id, name, creator, created, last used, revoked, idle days, and stale (live but unused for 90 days). Never a hash.';
COMMENT ON VIEW report.connector_activity_daily IS 'Tool calls per workspace connector per UTC day over the activity window: calls, errors, error rate, p95 and max duration (ms).';
COMMENT ON VIEW report.failing_connectors IS 'Connectors with at least one failed call in the last 24 hours: calls, errors, error rate, last error time and code.';
COMMENT ON VIEW report.open_issues IS 'Platform issues that are new or regressed: fingerprint, operation, stage, code, counts, last tenant and message. Platform readers only.';
COMMENT ON VIEW report.open_findings IS 'Findings that are open or acknowledged: kind, subject, operation, code, regressed flag, occurrences, first and last seen.';
COMMENT ON VIEW report.audit_by_actor IS 'Admin-log changes counted by tenant, actor and action, with first and last time (no before/after values).';
COMMENT ON VIEW report.tenant_usage IS 'Per tenant: members, workspaces, live tokens and service credentials, stored credentials, calls and errors in 30 days, ops failures in 30 days, open findings, last call.';
