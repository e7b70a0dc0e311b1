-- +goose Up
-- ff_refresh_statistics (migration 00021) also analyzes the ff_ tables
-- never analyzed yet that hold at least min_rows / factor live rows.
--
-- A table never analyzed has no statistics of its column values, and the
-- planner then takes a default selectivity for every test of a column:
-- 0.5% of the rows for a lane, whatever the table holds. ff_key, created
-- empty and filled by the first keyed creates, was planned so at 1,000
-- keys of one lane: the keys' turn read every key of the lane, with its
-- two index probes each, and sorted them, instead of reading them in
-- turn order up to the claim's size (4 ms a claim; auto_explain). Such a
-- table is analyzed as soon as it holds a few hundred rows, which costs
-- a few milliseconds once; after that, the factor rule of 00021 applies.
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
            AND ((c.reltuples >= 0 AND s.n_live_tup >= min_rows AND c.reltuples * factor < s.n_live_tup)
                OR (c.reltuples < 0 AND s.n_live_tup >= min_rows / factor))
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
        EXECUTE pg_catalog.format('ANALYZE (SKIP_LOCKED) %I', t.name);
        table_name := t.name;
        estimated_rows := t.est;
        live_rows := t.live;
        RETURN NEXT;
    END LOOP;
END
$$;
-- +goose StatementEnd
