-- Protocol fidelity (issue 19 §1, §2): the revision a connector's server was listed in, and the
-- caching hints it gave its tool list (its 2026-07-28 `ttlMs` and `cacheScope`), kept with the
-- catalog. NULL revision: listed before the column existed. NULL ttl_ms: the server gave no
-- hint (a handshake-era list), so the list is stale at once for an agent's cache. NULL
-- cache_scope: it said nothing of who may share the list.
ALTER TABLE connector_catalogs
    ADD COLUMN revision text CHECK (revision ~ '^\d{4}-\d{2}-\d{2}$'),
    ADD COLUMN ttl_ms bigint CHECK (ttl_ms >= 0),
    ADD COLUMN cache_scope text CHECK (cache_scope IN ('public', 'private'));
