-- Subject erasure and reap (issue 7, sections 5 and 6): the few extra rights the application
-- role needs to redact and to delete a reaped workspace's state, each guarded so that a bug in a
-- caller cannot use them for anything else.

-- Redaction rewrites the actor of activity rows (nothing else of an activity row may change).
GRANT UPDATE (actor_id) ON activity TO gatehouse_app;

-- Redaction rewrites the subject out of the failure text of the erasing tenant's own rows.
-- Platform rows (null tenant) stay platform-only.
GRANT UPDATE (message, reference) ON ops_failures TO gatehouse_app;
CREATE POLICY ops_failures_redact ON ops_failures FOR UPDATE
    USING (tenant_id = gatehouse_current_tenant()) WITH CHECK (tenant_id = gatehouse_current_tenant());

-- Replaces every occurrence of each of `needles` in `haystack` by `marker` (redaction of text).
CREATE FUNCTION gatehouse_redact(haystack text, needles text[], marker text) RETURNS text
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    needle text;
BEGIN
    IF haystack IS NULL THEN
        RETURN NULL;
    END IF;
    FOREACH needle IN ARRAY needles LOOP
        haystack := replace(haystack, needle, marker);
    END LOOP;
    RETURN haystack;
END
$$;

-- A reap deletes the workspace's rows everywhere, and the workspace row itself, in one
-- transaction. Configuration versions stay immutable otherwise: the trigger below allows
-- deleting them (and the workspace row) only once a reap of that workspace is claimed.
GRANT DELETE ON workspaces, workspace_versions, connect_links, oauth_clients, mcp_grants TO gatehouse_app;

CREATE FUNCTION gatehouse_reap_guard() RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    ws uuid;
BEGIN
    -- Separate statements: OLD has no `workspace_id` on workspaces, no `id` elsewhere.
    IF TG_TABLE_NAME = 'workspaces' THEN
        ws := OLD.id;
    ELSE
        ws := OLD.workspace_id;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM workspaces w
                    WHERE w.tenant_id = OLD.tenant_id AND w.id = ws
                      AND w.reap_claimed_at IS NOT NULL AND w.status = 'archived') THEN
        RAISE EXCEPTION 'only a claimed reap of an archived workspace deletes %', TG_TABLE_NAME
            USING ERRCODE = 'check_violation', CONSTRAINT = 'reap_claim_required';
    END IF;
    RETURN OLD;
END
$$;
CREATE TRIGGER workspaces_reap_guard BEFORE DELETE ON workspaces
    FOR EACH ROW EXECUTE FUNCTION gatehouse_reap_guard();
CREATE TRIGGER workspace_versions_reap_guard BEFORE DELETE ON workspace_versions
    FOR EACH ROW EXECUTE FUNCTION gatehouse_reap_guard();
CREATE TRIGGER connect_links_reap_guard BEFORE DELETE ON connect_links
    FOR EACH ROW EXECUTE FUNCTION gatehouse_reap_guard();
CREATE TRIGGER oauth_clients_reap_guard BEFORE DELETE ON oauth_clients
    FOR EACH ROW EXECUTE FUNCTION gatehouse_reap_guard();

-- A reap also deletes the tenant's failure evidence about the reaped workspace.
CREATE POLICY ops_failures_reap ON ops_failures FOR DELETE
    USING (tenant_id = gatehouse_current_tenant() AND workspace_id IS NOT NULL AND EXISTS (
        SELECT 1 FROM workspaces w
         WHERE w.tenant_id = ops_failures.tenant_id AND w.id = ops_failures.workspace_id AND w.reap_claimed_at IS NOT NULL));

-- The reap sweep of every replica finds claims left unfinished (a crash after the claim).
CREATE INDEX workspaces_reap_claimed ON workspaces (reap_claimed_at) WHERE reap_claimed_at IS NOT NULL;
