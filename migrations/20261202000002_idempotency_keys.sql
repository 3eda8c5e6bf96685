-- Idempotency keys (issue 21 §2): a mutating API call may carry an `Idempotency-Key`; the
-- transaction that carries out the mutation inserts the key's row just before it commits
-- (so a duplicate's insert waits for it, finds the key taken, and rolls back its own work),
-- and the answer is stored right after. Kept 24 hours; an expired row is taken over by the
-- next request with its key, and swept.
CREATE TABLE idempotency_keys (
    tenant_id uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    key text NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    -- SHA-256 of the method, path, query and body, bound to the caller.
    request_digest bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    -- The answer, once stored (NULL while the first request is still answering).
    status smallint,
    content_type text,
    body bytea,
    PRIMARY KEY (tenant_id, key)
);
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);
SELECT gatehouse_scope_to_tenant('idempotency_keys');
GRANT SELECT, INSERT, UPDATE, DELETE ON idempotency_keys TO gatehouse_app;
