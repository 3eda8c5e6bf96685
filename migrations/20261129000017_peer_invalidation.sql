-- Peer bindings follow their target (issue 7 §7): when a workspace is archived, reaped or
-- deleted, every explicit binding that points at it is invalidated in the same transaction as
-- that change, whoever makes it (the lifecycle API, the reap, a fork's expiry sweep), so no
-- caller has to know that bindings exist. An invalidated binding is kept (never silently
-- deleted): a call through it answers `bound_unavailable` and never falls back to resolution.
-- A workspace that is reaped or deleted also loses its own bindings (it will never call again).

CREATE FUNCTION gatehouse_peer_bindings_follow_target() RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    t uuid;
    w uuid;
    reason text;
    own_too boolean;
BEGIN
    IF TG_OP = 'DELETE' THEN
        t := OLD.tenant_id; w := OLD.id; reason := 'target_deleted'; own_too := true;
    ELSE
        t := NEW.tenant_id; w := NEW.id; reason := 'target_' || NEW.status; own_too := NEW.status = 'reaped';
    END IF;
    UPDATE peer_bindings
       SET invalidated_at = now(), invalidated_reason = reason
     WHERE tenant_id = t AND target_workspace_id = w AND invalidated_at IS NULL;
    IF own_too THEN
        DELETE FROM peer_bindings WHERE tenant_id = t AND workspace_id = w;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER workspaces_peer_target_status AFTER UPDATE OF status ON workspaces
    FOR EACH ROW WHEN (NEW.status IN ('archived', 'reaped') AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION gatehouse_peer_bindings_follow_target();
CREATE TRIGGER workspaces_peer_target_delete AFTER DELETE ON workspaces
    FOR EACH ROW EXECUTE FUNCTION gatehouse_peer_bindings_follow_target();
