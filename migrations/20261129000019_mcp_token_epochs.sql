-- OAuth access tokens of MCP clients join the per-tenant epoch (see the epochs migration), so a
-- replica may keep what it derived from a token (grant, client, member, role) labelled with the
-- epoch and check one primary-key read per request instead of the whole join. Everything that
-- can end a live token bumps the epoch in the same transaction: a grant or client revoked or
-- deleted, a token's lifetime changed or a live token deleted. (Members, their roles and the
-- permission overrides already bump it; a token's expiry is checked against the database clock
-- on every hit.) Issuing tokens and spending refresh tokens change nothing a cached access
-- token's answer depends on, so they do not bump it.
CREATE TRIGGER mcp_grants_epoch AFTER UPDATE OF revoked_at, member_id, resource, client_ref OR DELETE
    ON mcp_grants FOR EACH ROW EXECUTE FUNCTION gatehouse_bump_epoch();
CREATE TRIGGER mcp_clients_epoch AFTER UPDATE OF revoked_at OR DELETE
    ON mcp_clients FOR EACH ROW EXECUTE FUNCTION gatehouse_bump_epoch();
CREATE TRIGGER mcp_tokens_epoch AFTER UPDATE OF expires_at, grant_id, token_hash, kind
    ON mcp_tokens FOR EACH ROW EXECUTE FUNCTION gatehouse_bump_epoch();
-- Pruning deletes tokens expired for over a day: those can be in no cache answer (expiry is
-- checked on every hit), so only deleting a live token bumps.
CREATE TRIGGER mcp_tokens_epoch_delete AFTER DELETE ON mcp_tokens
    FOR EACH ROW WHEN (OLD.expires_at > now()) EXECUTE FUNCTION gatehouse_bump_epoch();
