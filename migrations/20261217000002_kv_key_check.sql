-- The key-value key's length is checked by a row trigger instead of a CHECK constraint
-- (issue 20 §4).
--
-- PostgreSQL 15 checks a table's CHECK constraints on every row an UPDATE writes, whichever
-- columns it sets, and parses each constraint's stored expression again for every statement
-- that does (`ExecConstraints` → `stringToNode`). A compare-and-set's decision is an UPDATE of
-- the value, so this check was 10% of the instructions of a `gatehouse_kv_cas` call
-- (callgrind, docs/benchmarks.md, "The compare-and-set's body"). A row trigger on INSERT and on
-- an UPDATE that sets the key checks the same rule where a key can change. Nothing else
-- writes a key: every row's key is still 1 to 512 bytes.
--
-- A refused row fails its statement with SQLSTATE 23514 (check_violation) under the
-- constraint's old name, as before, and the statement writes nothing.
ALTER TABLE kv_entries DROP CONSTRAINT kv_entries_key_check;

CREATE FUNCTION gatehouse_kv_key_fits() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF octet_length(NEW.key) NOT BETWEEN 1 AND 512 THEN
        RAISE EXCEPTION 'new row for relation "kv_entries" violates check constraint "kv_entries_key_check"'
            USING ERRCODE = 'check_violation', CONSTRAINT = 'kv_entries_key_check',
                  TABLE = 'kv_entries', COLUMN = 'key',
                  DETAIL = format('The key is %s bytes long; a key is 1 to 512 bytes.', octet_length(NEW.key));
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER kv_entries_key_check BEFORE INSERT OR UPDATE OF key ON kv_entries
    FOR EACH ROW EXECUTE FUNCTION gatehouse_kv_key_fits();
