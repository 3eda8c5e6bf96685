-- Acknowledged invalidation (issue 20): every `gatehouse serve` registers here with a lease it
-- renews, LISTENs for epoch changes, and records the highest epoch it has applied per tenant.
-- A transaction that moved an epoch commits, then waits until every replica with a live lease
-- has acknowledged that epoch (or its lease lapsed), so a replica may answer from its caches
-- without reading the epoch per request. A replica that cannot renew, or loses its LISTEN
-- connection, distrusts its caches (and reads the epoch per request) until it has registered
-- again and caught up. Leases are judged on the database clock here; each replica judges its
-- own earlier, on its monotonic clock, with a margin.

CREATE TABLE replicas (
    id uuid PRIMARY KEY,
    lease_expires_at timestamptz NOT NULL,
    registered_at timestamptz NOT NULL DEFAULT now()
);

-- What each replica has applied. Keyed by tenant first and scoped like every tenant row (a
-- tenant may read its own, e.g. to see which replicas have applied its changes); written only
-- through the functions below, in the platform context.
CREATE TABLE replica_acks (
    tenant_id uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    replica_id uuid NOT NULL REFERENCES replicas (id) ON DELETE CASCADE,
    epoch bigint NOT NULL,
    PRIMARY KEY (tenant_id, replica_id)
);
CREATE INDEX replica_acks_replica ON replica_acks (replica_id);
SELECT gatehouse_scope_to_tenant('replica_acks');
GRANT SELECT ON replica_acks TO gatehouse_app;

-- Every epoch change, whoever makes it: a notification for the replicas (delivered at commit,
-- so never for a change that rolled back) and a transaction-local note of the tenant's new
-- epoch, which the transaction helper reads in the same round trip as its COMMIT to know what
-- to wait for. The note holds one `tenant:epoch` per tenant, comma-separated.
CREATE FUNCTION gatehouse_epoch_moved() RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    noted text := coalesce(current_setting('gatehouse.bumped', true), '');
    entry text := NEW.id::text || ':' || NEW.epoch::text;
BEGIN
    PERFORM pg_notify('gatehouse_epochs', entry);
    IF position(NEW.id::text IN noted) > 0 THEN
        noted := regexp_replace(noted, NEW.id::text || ':[0-9]+', entry);
    ELSIF noted = '' THEN
        noted := entry;
    ELSE
        noted := noted || ',' || entry;
    END IF;
    PERFORM set_config('gatehouse.bumped', noted, true);
    RETURN NULL;
END
$$;
CREATE TRIGGER tenants_epoch_moved AFTER UPDATE ON tenants
    FOR EACH ROW WHEN (NEW.epoch IS DISTINCT FROM OLD.epoch) EXECUTE FUNCTION gatehouse_epoch_moved();

-- The functions below are the only way to these tables. Each switches the platform context
-- on for its own statements and back to what it was (as gatehouse_bump_epoch does).

-- Registers (or re-registers) a replica and catches it up: its acknowledgements become every
-- tenant's current epoch, which it returns so the replica applies them. The replica LISTENs
-- before calling this, so a change committed after this statement's snapshot is notified.
-- Replicas whose lease lapsed an hour ago are forgotten.
CREATE FUNCTION gatehouse_replica_register(p_id uuid, p_lease_ms bigint)
RETURNS TABLE (tenant_id uuid, epoch bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = public, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    prior text := coalesce(current_setting('gatehouse.platform', true), '');
BEGIN
    PERFORM set_config('gatehouse.platform', 'on', true);
    DELETE FROM replicas r WHERE r.lease_expires_at < now() - interval '1 hour';
    INSERT INTO replicas AS r (id, lease_expires_at) VALUES (p_id, now() + p_lease_ms * interval '1 millisecond')
        ON CONFLICT (id) DO UPDATE SET lease_expires_at = EXCLUDED.lease_expires_at, registered_at = now();
    RETURN QUERY
        INSERT INTO replica_acks AS a (tenant_id, replica_id, epoch)
        SELECT t.id, p_id, t.epoch FROM tenants t
        ON CONFLICT ON CONSTRAINT replica_acks_pkey DO UPDATE SET epoch = GREATEST(a.epoch, EXCLUDED.epoch)
        RETURNING a.tenant_id, a.epoch;
    PERFORM set_config('gatehouse.platform', prior, true);
END
$$;

-- Extends a live lease; false when it has lapsed (the replica must register again, since
-- waits that ended on the lapse did not count on it).
CREATE FUNCTION gatehouse_replica_renew(p_id uuid, p_lease_ms bigint) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = public, pg_temp
AS $$
BEGIN
    UPDATE replicas SET lease_expires_at = now() + p_lease_ms * interval '1 millisecond'
     WHERE id = p_id AND lease_expires_at > now();
    RETURN FOUND;
END
$$;

-- Records epochs a replica has applied (never lowers one).
CREATE FUNCTION gatehouse_replica_ack(p_id uuid, p_tenants uuid[], p_epochs bigint[]) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = public, pg_temp
AS $$
DECLARE
    prior text := coalesce(current_setting('gatehouse.platform', true), '');
BEGIN
    PERFORM set_config('gatehouse.platform', 'on', true);
    INSERT INTO replica_acks AS a (tenant_id, replica_id, epoch)
    SELECT w.tenant_id, p_id, w.epoch FROM unnest(p_tenants, p_epochs) AS w (tenant_id, epoch)
     WHERE EXISTS (SELECT 1 FROM tenants t WHERE t.id = w.tenant_id)
       AND EXISTS (SELECT 1 FROM replicas r WHERE r.id = p_id)
    ON CONFLICT ON CONSTRAINT replica_acks_pkey DO UPDATE SET epoch = GREATEST(a.epoch, EXCLUDED.epoch);
    PERFORM set_config('gatehouse.platform', prior, true);
END
$$;

-- A replica that stops cleanly leaves, so no change waits for its lease.
CREATE FUNCTION gatehouse_replica_leave(p_id uuid) RETURNS void
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = public, pg_temp
AS $$ DELETE FROM replicas WHERE id = p_id $$;

-- How many replicas with a live lease have not yet acknowledged each tenant's epoch.
CREATE FUNCTION gatehouse_replicas_behind(p_tenants uuid[], p_epochs bigint[]) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = public, pg_temp
AS $$
DECLARE
    prior text := coalesce(current_setting('gatehouse.platform', true), '');
    behind bigint;
BEGIN
    PERFORM set_config('gatehouse.platform', 'on', true);
    SELECT count(DISTINCT r.id) INTO behind
      FROM replicas r CROSS JOIN unnest(p_tenants, p_epochs) AS w (tenant_id, epoch)
     WHERE r.lease_expires_at > now()
       AND NOT EXISTS (SELECT 1 FROM replica_acks a
                        WHERE a.tenant_id = w.tenant_id AND a.replica_id = r.id AND a.epoch >= w.epoch);
    PERFORM set_config('gatehouse.platform', prior, true);
    RETURN behind;
END
$$;

REVOKE ALL ON FUNCTION gatehouse_replica_register(uuid, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION gatehouse_replica_renew(uuid, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION gatehouse_replica_ack(uuid, uuid[], bigint[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION gatehouse_replica_leave(uuid) FROM PUBLIC;
REVOKE ALL ON FUNCTION gatehouse_replicas_behind(uuid[], bigint[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION gatehouse_replica_register(uuid, bigint) TO gatehouse_app;
GRANT EXECUTE ON FUNCTION gatehouse_replica_renew(uuid, bigint) TO gatehouse_app;
GRANT EXECUTE ON FUNCTION gatehouse_replica_ack(uuid, uuid[], bigint[]) TO gatehouse_app;
GRANT EXECUTE ON FUNCTION gatehouse_replica_leave(uuid) TO gatehouse_app;
GRANT EXECUTE ON FUNCTION gatehouse_replicas_behind(uuid[], bigint[]) TO gatehouse_app;
