-- hal_pg 0.1: the shared buffer's SQL functions.
\echo Use "CREATE EXTENSION hal_pg" to load this file. \quit

CREATE FUNCTION hal_pg_write(offset_bytes bigint, data bytea) RETURNS void
    AS 'MODULE_PATHNAME', 'hal_pg_write'
    LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION hal_pg_write(bigint, bytea) IS
    'write data into the shared buffer at offset_bytes';

CREATE FUNCTION hal_pg_read(offset_bytes bigint, len integer) RETURNS bytea
    AS 'MODULE_PATHNAME', 'hal_pg_read'
    LANGUAGE C STRICT VOLATILE PARALLEL SAFE;
COMMENT ON FUNCTION hal_pg_read(bigint, integer) IS
    'len bytes of the shared buffer from offset_bytes';

CREATE FUNCTION hal_pg_checksum() RETURNS bigint
    AS 'MODULE_PATHNAME', 'hal_pg_checksum'
    LANGUAGE C STRICT VOLATILE PARALLEL SAFE;
COMMENT ON FUNCTION hal_pg_checksum() IS
    'FNV-1a (64 bits) of the whole shared buffer';

CREATE FUNCTION hal_pg_info() RETURNS text
    AS 'MODULE_PATHNAME', 'hal_pg_info'
    LANGUAGE C STRICT VOLATILE PARALLEL SAFE;
COMMENT ON FUNCTION hal_pg_info() IS
    'the buffer''s backend, size, importers, worker pid and generation, and this process''s first import time';

-- Every session that may run these functions reads, and may overwrite, the
-- one buffer that all sessions of the cluster share: none but their owner
-- (the role that ran CREATE EXTENSION) and superusers may, until granted
-- (see the README: GRANT EXECUTE ON FUNCTION ... TO a role of the cluster's).
REVOKE ALL ON FUNCTION hal_pg_write(bigint, bytea) FROM PUBLIC;
REVOKE ALL ON FUNCTION hal_pg_read(bigint, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION hal_pg_checksum() FROM PUBLIC;
REVOKE ALL ON FUNCTION hal_pg_info() FROM PUBLIC;
