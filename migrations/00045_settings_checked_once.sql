-- +goose Up
-- An execution's settings are checked once, when they are written, not
-- on every change of the row.
--
-- Postgres evaluates every CHECK constraint of a table on every insert
-- and every update, whatever columns the update sets, and prepares each
-- check's expression again for every statement. ff_execution had 25; a
-- claim and a completion each paid for all of them, row by row, though
-- six guard a column each that no statement changes after the insert (the
-- retry settings, the lease's length, the attempt's timeout).
-- A domain's check is evaluated where a value is cast to the domain: on
-- insert (COPY included), and on update only for a column the update
-- sets. The same six rules, moved onto domains, guard every new row as
-- before and cost the hot path nothing (docs/benchmarks.md).
--
-- Instant on a table of any size, in one transaction: a column's type
-- changed to a domain of its own type without constraints is a catalog
-- change (no rewrite; none of the six is indexed, so no index is
-- rebuilt), and each domain's check is then added NOT VALID, which
-- enforces it on every new value without reading the table. The rows
-- already there passed the very same rules as table checks, which this
-- transaction drops only after that, holding the table exclusively
-- throughout; validating the domains' checks would read the whole table
-- under a lock that stops writes, to learn nothing. Checks that name two
-- columns, or a column other statements set or index, stay table checks;
-- so does the tags' (an object): a client that binds a parameter for a
-- column learns its type from the server, and pgx, with which releases
-- before this one bind the tags as a JSON map, encodes no value for a
-- type it does not know. Those releases bind the six as numbers, which
-- pgx encodes for any type, so they keep working on this schema.
CREATE DOMAIN ff_max_attempts AS integer;
CREATE DOMAIN ff_backoff_base AS interval;
CREATE DOMAIN ff_backoff_multiplier AS double precision;
CREATE DOMAIN ff_backoff_jitter AS double precision;
CREATE DOMAIN ff_lease_ttl AS interval;
CREATE DOMAIN ff_attempt_timeout AS interval;
ALTER TABLE ff_execution
    ALTER COLUMN max_attempts TYPE ff_max_attempts,
    ALTER COLUMN backoff_base TYPE ff_backoff_base,
    ALTER COLUMN backoff_multiplier TYPE ff_backoff_multiplier,
    ALTER COLUMN backoff_jitter TYPE ff_backoff_jitter,
    ALTER COLUMN lease_ttl TYPE ff_lease_ttl,
    ALTER COLUMN attempt_timeout TYPE ff_attempt_timeout;
ALTER DOMAIN ff_max_attempts ADD CONSTRAINT ff_max_attempts_range
    CHECK (VALUE >= 1 AND VALUE <= 1000) NOT VALID;
ALTER DOMAIN ff_backoff_base ADD CONSTRAINT ff_backoff_base_positive
    CHECK (VALUE > interval '0') NOT VALID;
ALTER DOMAIN ff_backoff_multiplier ADD CONSTRAINT ff_backoff_multiplier_range
    CHECK (VALUE >= 1 AND VALUE <= 100) NOT VALID;
ALTER DOMAIN ff_backoff_jitter ADD CONSTRAINT ff_backoff_jitter_range
    CHECK (VALUE >= 0 AND VALUE <= 1) NOT VALID;
ALTER DOMAIN ff_lease_ttl ADD CONSTRAINT ff_lease_ttl_range
    CHECK (VALUE >= interval '1 second' AND VALUE <= interval '1 day') NOT VALID;
ALTER DOMAIN ff_attempt_timeout ADD CONSTRAINT ff_attempt_timeout_range
    CHECK (VALUE > interval '0' AND VALUE <= interval '7 days') NOT VALID;
ALTER TABLE ff_execution
    DROP CONSTRAINT ff_execution_max_attempts_check,
    DROP CONSTRAINT ff_execution_backoff_base_check,
    DROP CONSTRAINT ff_execution_backoff_multiplier_check,
    DROP CONSTRAINT ff_execution_backoff_jitter_check,
    DROP CONSTRAINT ff_execution_lease_ttl_check,
    DROP CONSTRAINT ff_execution_attempt_timeout_check;

-- +goose Down
-- The table checks come back (each reads the table once), then the
-- columns take their own types again (a catalog change) and the domains
-- go.
ALTER TABLE ff_execution
    ADD CONSTRAINT ff_execution_max_attempts_check CHECK (max_attempts >= 1 AND max_attempts <= 1000),
    ADD CONSTRAINT ff_execution_backoff_base_check CHECK (backoff_base > interval '0'),
    ADD CONSTRAINT ff_execution_backoff_multiplier_check CHECK (backoff_multiplier >= 1 AND backoff_multiplier <= 100),
    ADD CONSTRAINT ff_execution_backoff_jitter_check CHECK (backoff_jitter >= 0 AND backoff_jitter <= 1),
    ADD CONSTRAINT ff_execution_lease_ttl_check CHECK (lease_ttl >= interval '1 second' AND lease_ttl <= interval '1 day'),
    ADD CONSTRAINT ff_execution_attempt_timeout_check CHECK (attempt_timeout > interval '0' AND attempt_timeout <= interval '7 days');
ALTER TABLE ff_execution
    ALTER COLUMN max_attempts TYPE integer,
    ALTER COLUMN backoff_base TYPE interval,
    ALTER COLUMN backoff_multiplier TYPE double precision,
    ALTER COLUMN backoff_jitter TYPE double precision,
    ALTER COLUMN lease_ttl TYPE interval,
    ALTER COLUMN attempt_timeout TYPE interval;
DROP DOMAIN ff_max_attempts, ff_backoff_base, ff_backoff_multiplier, ff_backoff_jitter,
    ff_lease_ttl, ff_attempt_timeout;
