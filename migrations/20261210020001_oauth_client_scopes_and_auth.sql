-- The scopes a flow asked for (kept on the grant it made), and a grant's step-up: the union
-- of its scopes and those a downstream's `insufficient_scope` challenge named, which the
-- next authorization asks for (SEP-2350). Cleared when the grant is connected again.
ALTER TABLE oauth_flows
    ADD COLUMN scopes text[];
ALTER TABLE oauth_grants
    ADD COLUMN scopes text[],
    ADD COLUMN step_up_scopes text[];

-- How a client Gatehouse registered for itself (RFC 7591) authenticates at the token
-- endpoint: `none` (public), or `client_secret_basic` / `client_secret_post` when the server
-- offers only those, the issued secret then sealed in the vault as the connector's
-- `oauth_client` credential (never in this table).
ALTER TABLE oauth_clients
    ADD COLUMN client_auth text NOT NULL DEFAULT 'none'
        CHECK (client_auth IN ('none', 'client_secret_basic', 'client_secret_post'));
