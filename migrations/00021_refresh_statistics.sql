-- +goose Up
-- ff_refresh_statistics analyzes the ff_ tables of its schema whose
-- planner statistics say they hold under 1/factor of their live rows
-- (at least min_rows of them), and returns those it analyzed. The daemon
-- calls it every few seconds (docs/operations.md, "Planner statistics").
--
-- A queue drains and refills. Analyzed while empty, a table keeps a row
-- estimate of zero however much it refills, and the planner plans every
-- statement on it as if it were empty (full scans; a batch's input re-read
-- once per row) until autovacuum analyzes it again, up to
-- autovacuum_naptime later. Measured on one machine: a 1,000-member
-- cancel_flow took 0.5-1.2 s instead of 50 ms.
--
-- ANALYZE needs the table's owner; the daemon's role only writes rows
-- (deploy/roles.sql). The function runs as its owner, the role that ran
-- the migrations, on its own schema only (the search path it was created
-- with), and takes nothing but two numbers.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ff_refresh_statistics(min_rows bigint, factor double precision)
RETURNS TABLE (table_name text, estimated_rows bigint, live_rows bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    t record;
BEGIN
    IF min_rows IS NULL OR min_rows < 1 OR factor IS NULL OR factor < 1 THEN
        RAISE EXCEPTION 'ff_refresh_statistics: want min_rows >= 1 and factor >= 1, got % and %', min_rows, factor
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR t IN SELECT c.relname::text AS name, c.reltuples::bigint AS est, s.n_live_tup AS live
        FROM pg_catalog.pg_class c
        JOIN pg_catalog.pg_stat_user_tables s ON s.relid = c.oid
        WHERE c.relnamespace = pg_catalog.current_schema()::pg_catalog.regnamespace
            AND c.relkind = 'r' AND c.relname LIKE 'ff\_%'
            AND c.reltuples >= 0 AND s.n_live_tup >= min_rows AND c.reltuples * factor < s.n_live_tup
        ORDER BY c.relname
    LOOP
        -- SKIP_LOCKED: a session analyzing or vacuuming it already is
        -- refreshing it.
        EXECUTE pg_catalog.format('ANALYZE (SKIP_LOCKED) %I', t.name);
        table_name := t.name;
        estimated_rows := t.est;
        live_rows := t.live;
        RETURN NEXT;
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION IF EXISTS ff_refresh_statistics(bigint, double precision);
