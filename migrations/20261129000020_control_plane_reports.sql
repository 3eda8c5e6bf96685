-- Two reports issue 8 left for the control plane, now that its tables exist: the copy ledger's
-- health and the erasure receipts. Same shape as the reports migration: a SECURITY DEFINER
-- function scoped by the reader, behind a documented view in schema `report`.

CREATE FUNCTION gatehouse_report_copy_ledger_health()
    RETURNS TABLE (tenant_id uuid, tenant text, workspace text, kind text, state text, copies bigint,
                   past_lease bigint, claimed bigint, oldest_created_at timestamptz, oldest_lease_until timestamptz)
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
    AS $$
#variable_conflict use_column
DECLARE s record; was text := current_setting('gatehouse.platform', true);
BEGIN
    SELECT * INTO s FROM gatehouse_report_scope();
    RETURN QUERY
    SELECT c.tenant_id, t.slug, coalesce(w.slug, ts.slug || ' (reaped)', c.workspace_id::text), c.kind, c.state, count(*),
           count(*) FILTER (WHERE c.state = 'pending' AND c.lease_until < now()),
           count(*) FILTER (WHERE c.lease_owner IS NOT NULL),
           min(c.created_at), min(c.lease_until) FILTER (WHERE c.state = 'pending')
    FROM copies c JOIN tenants t ON t.id = c.tenant_id
    LEFT JOIN workspaces w ON w.tenant_id = c.tenant_id AND w.id = c.workspace_id
    LEFT JOIN workspace_tombstones ts ON ts.tenant_id = c.tenant_id AND ts.workspace_id = c.workspace_id
    WHERE (s.platform OR c.tenant_id = s.tenant) AND (c.state <> 'done' OR c.settled_at > now() - interval '7 days')
    GROUP BY c.tenant_id, t.slug, 3, c.kind, c.state
    ORDER BY 2, 3, 4, 5;
    PERFORM set_config('gatehouse.platform', coalesce(was, ''), true);
END
$$;

CREATE FUNCTION gatehouse_report_erasure_receipts()
    RETURNS TABLE (tenant_id uuid, tenant text, workspace text, receipt uuid, subject_digest text, epoch bigint,
                   counts text, erased_by text, erased_at timestamptz)
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
    AS $$
#variable_conflict use_column
DECLARE s record; was text := current_setting('gatehouse.platform', true);
BEGIN
    SELECT * INTO s FROM gatehouse_report_scope();
    RETURN QUERY
    SELECT r.tenant_id, t.slug, coalesce(w.slug, ts.slug || ' (reaped)', r.workspace_id::text), r.id, r.subject_digest,
           r.epoch, r.counts::text, r.erased_by, r.erased_at
    FROM erasure_receipts r JOIN tenants t ON t.id = r.tenant_id
    LEFT JOIN workspaces w ON w.tenant_id = r.tenant_id AND w.id = r.workspace_id
    LEFT JOIN workspace_tombstones ts ON ts.tenant_id = r.tenant_id AND ts.workspace_id = r.workspace_id
    WHERE s.platform OR r.tenant_id = s.tenant
    ORDER BY r.erased_at DESC, r.id;
    PERFORM set_config('gatehouse.platform', coalesce(was, ''), true);
END
$$;

DO $$
DECLARE f text;
BEGIN
    FOREACH f IN ARRAY ARRAY['copy_ledger_health', 'erasure_receipts'] LOOP
        EXECUTE format('REVOKE ALL ON FUNCTION gatehouse_report_%s() FROM PUBLIC', f);
        EXECUTE format('GRANT EXECUTE ON FUNCTION gatehouse_report_%s() TO gatehouse_report, gatehouse_app', f);
        EXECUTE format('CREATE VIEW report.%I AS SELECT * FROM gatehouse_report_%s()', f, f);
        EXECUTE format('GRANT SELECT ON report.%I TO gatehouse_report, gatehouse_app', f);
    END LOOP;
END
$$;

COMMENT ON VIEW report.copy_ledger_health IS 'Copy-ledger rows per workspace, move kind and state (settled ones for 7 days): count, pending past their lease, claimed by the recovery sweep, oldest row and oldest pending lease.';
COMMENT ON VIEW report.erasure_receipts IS 'Subject erasures: workspace, receipt id, digest of the subject (never the subject), the new erasure epoch, counts per kind, who and when.';
