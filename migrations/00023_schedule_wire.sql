-- +goose Up
-- ff_schedule.params held encoding/json's spelling of the Go structs the
-- create path takes ({"Lane": ..., "LeaseTTL": <nanoseconds>, ...}), a
-- format nobody had written down: renaming a Go field would have dropped
-- that field from every stored row. From here they are the format of
-- internal/schedule/wire.go, version 1: snake_case keys, durations in
-- microseconds, zero values left out, and the target under its own key:
--   {"v": 1, "execution": {...}}   or   {"v": 1, "flow": {"nodes": [...], "edges": [...]}}
-- This rewrites the rows stored before it; the functions go with it.

-- +goose StatementBegin
CREATE FUNCTION ff_wire_v1_execution(p jsonb) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(jsonb_object_agg(k, v), '{}'::jsonb)
    FROM (VALUES
        ('lane', to_jsonb(nullif(p->>'Lane', ''))),
        ('kind', to_jsonb(nullif(p->>'Kind', ''))),
        ('payload', CASE WHEN jsonb_typeof(p->'Payload') = 'string' AND p->>'Payload' <> '' THEN p->'Payload' END),
        ('priority', to_jsonb(nullif((p->>'Priority')::int, 0))),
        ('required_capabilities', CASE WHEN jsonb_typeof(p->'RequiredCapabilities') = 'array'
            AND jsonb_array_length(p->'RequiredCapabilities') > 0 THEN p->'RequiredCapabilities' END),
        ('max_attempts', to_jsonb(nullif((p->>'MaxAttempts')::int, 0))),
        ('retry', (SELECT nullif(coalesce(jsonb_object_agg(rk, rv), '{}'::jsonb), '{}'::jsonb)
            FROM (VALUES
                ('base_us', to_jsonb(nullif((p->'Retry'->>'Base')::bigint / 1000, 0))),
                ('max_us', to_jsonb(nullif((p->'Retry'->>'Max')::bigint / 1000, 0))),
                ('multiplier', to_jsonb(nullif((p->'Retry'->>'Multiplier')::float8, 0))),
                ('jitter', to_jsonb(nullif((p->'Retry'->>'Jitter')::float8, 0)))
            ) r(rk, rv) WHERE rv IS NOT NULL)),
        ('lease_ttl_us', to_jsonb(nullif((p->>'LeaseTTL')::bigint / 1000, 0))),
        ('attempt_timeout_us', to_jsonb(nullif((p->>'AttemptTimeout')::bigint / 1000, 0))),
        ('deadline_us', to_jsonb(nullif((p->>'Deadline')::bigint / 1000, 0))),
        ('delay_us', to_jsonb(nullif((p->>'Delay')::bigint / 1000, 0))),
        ('tags', CASE WHEN jsonb_typeof(p->'Tags') = 'object' AND p->'Tags' <> '{}'::jsonb THEN p->'Tags' END),
        ('step', to_jsonb(nullif(p->>'Step', ''))),
        ('unique_key', to_jsonb(nullif(p->>'UniqueKey', ''))),
        ('unique_window_us', to_jsonb(nullif((p->>'UniqueWindow')::bigint / 1000, 0)))
    ) f(k, v)
    WHERE v IS NOT NULL
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION ff_wire_v1_flow(p jsonb) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT jsonb_object_agg(k, v)
    FROM (VALUES
        ('kind', to_jsonb(nullif(p->'Flow'->>'Kind', ''))),
        ('tags', CASE WHEN jsonb_typeof(p->'Flow'->'Tags') = 'object' AND p->'Flow'->'Tags' <> '{}'::jsonb THEN p->'Flow'->'Tags' END),
        ('nodes', (SELECT coalesce(jsonb_agg(
                jsonb_build_object('ref', n->'Ref', 'execution', ff_wire_v1_execution(n->'Params'))
                || CASE WHEN jsonb_typeof(n->'Policy') = 'object' THEN jsonb_build_object('policy',
                    jsonb_build_object('kind', n->'Policy'->'Kind')
                    || CASE WHEN (n->'Policy'->>'K')::int > 0 THEN jsonb_build_object('k', (n->'Policy'->>'K')::int) ELSE '{}'::jsonb END
                    || CASE WHEN n->'Policy'->>'OnSatisfied' <> '' THEN jsonb_build_object('on_satisfied', n->'Policy'->'OnSatisfied') ELSE '{}'::jsonb END)
                ELSE '{}'::jsonb END
                ORDER BY i), '[]'::jsonb)
            FROM jsonb_array_elements(CASE WHEN jsonb_typeof(p->'Nodes') = 'array' THEN p->'Nodes' ELSE '[]'::jsonb END)
                WITH ORDINALITY AS nodes(n, i))),
        ('edges', (SELECT jsonb_agg(
                jsonb_build_object('from', e->'From', 'to', e->'To')
                || CASE WHEN e->>'DependencyKind' <> '' THEN jsonb_build_object('dependency_kind', e->'DependencyKind') ELSE '{}'::jsonb END
                || CASE WHEN e->>'DataPassingRef' <> '' THEN jsonb_build_object('data_passing_ref', e->'DataPassingRef') ELSE '{}'::jsonb END
                ORDER BY i)
            FROM jsonb_array_elements(CASE WHEN jsonb_typeof(p->'Edges') = 'array' THEN p->'Edges' ELSE '[]'::jsonb END)
                WITH ORDINALITY AS edges(e, i)))
    ) f(k, v)
    WHERE v IS NOT NULL
$$;
-- +goose StatementEnd

UPDATE ff_schedule
SET params = CASE target
    WHEN 'execution' THEN jsonb_build_object('v', 1, 'execution', ff_wire_v1_execution(params))
    ELSE jsonb_build_object('v', 1, 'flow', ff_wire_v1_flow(params)) END
WHERE NOT params ? 'v';

DROP FUNCTION ff_wire_v1_flow(jsonb);
DROP FUNCTION ff_wire_v1_execution(jsonb);

-- +goose Down
-- Back to the Go field names and nanoseconds an ffd before this
-- migration reads (encoding/json matches keys without regard to case, so
-- the keys that only differ in case come back as they are).

-- +goose StatementBegin
CREATE FUNCTION ff_wire_v0_execution(w jsonb) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(jsonb_object_agg(k, v), '{}'::jsonb)
    FROM (VALUES
        ('Lane', w->'lane'), ('Kind', w->'kind'), ('Payload', w->'payload'), ('Priority', w->'priority'),
        ('RequiredCapabilities', w->'required_capabilities'), ('MaxAttempts', w->'max_attempts'),
        ('Retry', CASE WHEN w ? 'retry' THEN jsonb_build_object(
            'Base', coalesce((w->'retry'->>'base_us')::bigint, 0) * 1000,
            'Max', coalesce((w->'retry'->>'max_us')::bigint, 0) * 1000,
            'Multiplier', coalesce((w->'retry'->>'multiplier')::float8, 0),
            'Jitter', coalesce((w->'retry'->>'jitter')::float8, 0)) END),
        ('LeaseTTL', to_jsonb((w->>'lease_ttl_us')::bigint * 1000)),
        ('AttemptTimeout', to_jsonb((w->>'attempt_timeout_us')::bigint * 1000)),
        ('Deadline', to_jsonb((w->>'deadline_us')::bigint * 1000)),
        ('Delay', to_jsonb((w->>'delay_us')::bigint * 1000)),
        ('Tags', w->'tags'), ('Step', w->'step'), ('UniqueKey', w->'unique_key'),
        ('UniqueWindow', to_jsonb((w->>'unique_window_us')::bigint * 1000))
    ) f(k, v)
    WHERE v IS NOT NULL
$$;
-- +goose StatementEnd

UPDATE ff_schedule
SET params = CASE target
    WHEN 'execution' THEN ff_wire_v0_execution(params->'execution')
    ELSE jsonb_build_object(
        'Flow', jsonb_build_object('Kind', coalesce(params->'flow'->'kind', '""'), 'Tags', params->'flow'->'tags'),
        'Nodes', (SELECT coalesce(jsonb_agg(jsonb_build_object('Ref', n->'ref', 'Params', ff_wire_v0_execution(n->'execution'),
                'Policy', CASE WHEN n ? 'policy' THEN jsonb_build_object('Kind', n->'policy'->'kind',
                    'K', coalesce(n->'policy'->'k', '0'), 'OnSatisfied', coalesce(n->'policy'->'on_satisfied', '""')) END)
                ORDER BY i), '[]'::jsonb)
            FROM jsonb_array_elements(params->'flow'->'nodes') WITH ORDINALITY AS nodes(n, i)),
        'Edges', (SELECT jsonb_agg(jsonb_build_object('From', e->'from', 'To', e->'to',
                'DependencyKind', coalesce(e->'dependency_kind', '""'), 'DataPassingRef', coalesce(e->'data_passing_ref', '""'))
                ORDER BY i)
            FROM jsonb_array_elements(coalesce(params->'flow'->'edges', '[]'::jsonb)) WITH ORDINALITY AS edges(e, i)))
    END
WHERE (params->>'v')::int = 1;

DROP FUNCTION ff_wire_v0_execution(jsonb);
