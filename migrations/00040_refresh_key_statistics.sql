-- +goose Up
-- ff_refresh_statistics reads ff_key's rows, as it reads ff_execution's,
-- when its statistics put it under min_rows / factor rows, and when it
-- was never analyzed (under min_rows / factor rows read, then): the
-- counts it otherwise goes by reach the statistics collector up to 10 s
-- after the writes. A lane's keys created at once, never analyzed, were
-- planned as 5 of 1,000 rows (the default selectivity of lane = $1), and
-- the keyed claim's turn read and sorted every key of the lane, testing
-- each for room and due work, at every claim until the next analysis
-- (1.2 against 4.3 ms a turn; docs/benchmarks.md). ff_execution, never
-- analyzed, is read the same way now. Both still skipped when Citus
-- distributes them.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ff_refresh_statistics(min_rows bigint, factor double precision)
RETURNS TABLE (table_name text, estimated_rows bigint, live_rows bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    t record;
    done text[] := '{}';
    tab text;
    dist boolean;
    distributed text[] := '{}';
    want bigint;
    live bigint;
    sampled timestamptz;
    est bigint;
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
        done := done || t.name;
        table_name := t.name;
        estimated_rows := t.est;
        live_rows := t.live;
        RETURN NEXT;
    END LOOP;
    -- The rules above see rows only once the writers' counts reach the
    -- statistics collector (up to 10 s after the writes). For the two
    -- tables whose statistics the claims' plans hang on, read at most
    -- the rows that settle it instead: statistics that put ff_execution
    -- or ff_key below min_rows / factor rows while it holds min_rows
    -- (analyzed over deleted rows, or nearly empty, then filled), or a
    -- table never analyzed that holds min_rows / factor (its column
    -- statistics are the planner's defaults: a lane of 1,000 keys taken
    -- for 5, and the keyed claim's turn sorted all of them). A table
    -- distributed by Citus keeps its statistics on its shards: skipped.
    FOREACH tab IN ARRAY ARRAY['ff_execution', 'ff_key'] LOOP
        CONTINUE WHEN tab = ANY (done);
        dist := false;
        IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
            EXECUTE 'SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition WHERE logicalrelid = $1)'
                INTO dist USING tab::regclass;
        END IF;
        IF dist THEN
            distributed := distributed || tab;
            CONTINUE;
        END IF;
        SELECT c.reltuples::bigint INTO est FROM pg_catalog.pg_class c WHERE c.oid = tab::regclass;
        want := CASE WHEN est < 0 THEN ceil(min_rows / factor)::bigint ELSE min_rows END;
        CONTINUE WHEN est >= 0 AND est * factor >= min_rows;
        EXECUTE pg_catalog.format('SELECT count(*) FROM (SELECT 1 FROM %I LIMIT $1) x', tab) INTO live USING want;
        CONTINUE WHEN live < want;
        EXECUTE pg_catalog.format('ANALYZE (SKIP_LOCKED) %I', tab);
        done := done || tab;
        table_name := tab;
        estimated_rows := est;
        live_rows := live;
        RETURN NEXT;
    END LOOP;
    -- Analyzed now, or distributed (its statistics are its shards'): the
    -- rule of the live states has nothing to add.
    IF 'ff_execution' = ANY (done || distributed) THEN
        RETURN;
    END IF;
    -- The live rows the last sample counted, if it came after the last
    -- analysis (a sample from before it is what the analysis saw).
    SELECT sum(l.pending + l.delayed + l.running + l.blocked)::bigint, max(l.sampled_at)
        INTO live, sampled
        FROM ff_lane_stats l;
    IF live IS NULL OR live < min_rows OR sampled <= (
            SELECT greatest(s.last_analyze, s.last_autoanalyze) FROM pg_catalog.pg_stat_user_tables s
            WHERE s.relid = 'ff_execution'::regclass) THEN
        RETURN;
    END IF;
    -- The rows the statistics put in the live states: the most common
    -- states' shares of the row estimate; a live state not among them
    -- counts for none. A column never analyzed is the rules' above.
    SELECT (c.reltuples * coalesce((SELECT sum(f.freq) FROM unnest(s.most_common_vals::text::text[], s.most_common_freqs)
                AS f(val, freq) WHERE f.val IN ('pending', 'running', 'blocked')), 0))::bigint
        INTO est
        FROM pg_catalog.pg_class c
        JOIN pg_catalog.pg_stats s ON s.schemaname = pg_catalog.current_schema() AND s.tablename = c.relname
            AND s.attname = 'state'
        WHERE c.oid = 'ff_execution'::regclass AND c.reltuples >= 0;
    IF est IS NULL OR est * factor >= live THEN
        RETURN;
    END IF;
    ANALYZE (SKIP_LOCKED) ff_execution;
    table_name := 'ff_execution';
    estimated_rows := est;
    live_rows := live;
    RETURN NEXT;
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
    analyzed boolean := false;
    live bigint;
    sampled timestamptz;
    est bigint;
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
        analyzed := analyzed OR t.name = 'ff_execution';
        table_name := t.name;
        estimated_rows := t.est;
        live_rows := t.live;
        RETURN NEXT;
    END LOOP;
    IF analyzed THEN
        RETURN;
    END IF;
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        EXECUTE 'SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition WHERE logicalrelid = $1)'
            INTO analyzed USING 'ff_execution'::regclass;
        IF analyzed THEN
            RETURN;
        END IF;
    END IF;
    -- Statistics that put ff_execution below min_rows / factor rows while
    -- it holds min_rows: analyzed with its rows deleted and not yet
    -- vacuumed, then refilled. The planner then takes it for empty, and a
    -- full scan of an index for free. The rule above sees the refill only
    -- once the writers' counts reach the statistics collector (up to 10 s
    -- later); this reads at most min_rows rows to know now.
    SELECT c.reltuples::bigint INTO est FROM pg_catalog.pg_class c WHERE c.oid = 'ff_execution'::regclass;
    IF est >= 0 AND est * factor < min_rows THEN
        SELECT count(*) INTO live FROM (SELECT 1 FROM ff_execution LIMIT min_rows) x;
        IF live >= min_rows THEN
            ANALYZE (SKIP_LOCKED) ff_execution;
            table_name := 'ff_execution';
            estimated_rows := est;
            live_rows := live;
            RETURN NEXT;
            RETURN;
        END IF;
    END IF;
    -- The live rows the last sample counted, if it came after the last
    -- analysis (a sample from before it is what the analysis saw).
    SELECT sum(l.pending + l.delayed + l.running + l.blocked)::bigint, max(l.sampled_at)
        INTO live, sampled
        FROM ff_lane_stats l;
    IF live IS NULL OR live < min_rows OR sampled <= (
            SELECT greatest(s.last_analyze, s.last_autoanalyze) FROM pg_catalog.pg_stat_user_tables s
            WHERE s.relid = 'ff_execution'::regclass) THEN
        RETURN;
    END IF;
    -- The rows the statistics put in the live states: the most common
    -- states' shares of the row estimate; a live state not among them
    -- counts for none. A column never analyzed is the rules' above.
    SELECT (c.reltuples * coalesce((SELECT sum(f.freq) FROM unnest(s.most_common_vals::text::text[], s.most_common_freqs)
                AS f(val, freq) WHERE f.val IN ('pending', 'running', 'blocked')), 0))::bigint
        INTO est
        FROM pg_catalog.pg_class c
        JOIN pg_catalog.pg_stats s ON s.schemaname = pg_catalog.current_schema() AND s.tablename = c.relname
            AND s.attname = 'state'
        WHERE c.oid = 'ff_execution'::regclass AND c.reltuples >= 0;
    IF est IS NULL OR est * factor >= live THEN
        RETURN;
    END IF;
    ANALYZE (SKIP_LOCKED) ff_execution;
    table_name := 'ff_execution';
    estimated_rows := est;
    live_rows := live;
    RETURN NEXT;
END
$$;
-- +goose StatementEnd
