-- Forks and the copy ledger's recovery sweep delete a copy that is a whole workspace: an expired
-- fork, or the orphaned destination of a move that crashed (a fork or a restore still in
-- `provisioning`). Until now the application role could not delete a workspace or anything that
-- references one; the code deletes only those two kinds (`fork_of IS NOT NULL`, or
-- `status = 'provisioning'`), children first, in one transaction with its admin-log row.
GRANT DELETE ON workspaces, workspace_versions, connect_links, oauth_clients, mcp_grants TO gatehouse_app;
