-- ffd's SQL API (docs/sql.md): producers in any language create
-- executions, submit flows, signal, publish, cancel and read, each call
-- inside the caller's own transaction.
--
-- A template: APIFunctions (sqlapi.go) renders it, and every `ffd
-- migrate up` runs it after the migrations. What writes is the Go API's
-- own statements, rendered in from the constants the store runs (the
-- q .S and rows .S actions), and the limits and defaults are the Go API's, rendered
-- in from its constants; only the checks that turn JSON into
-- those statements' arguments are written here, and a differential test
-- (sqlapi_test.go) holds them to the Go API's answers.
--
-- Every function runs as its owner (the migrating role) with a fixed
-- search_path, so a role granted EXECUTE needs no privilege on any table
-- (deploy/roles.sql, ffd_producer); EXECUTE is taken from PUBLIC.

-- Errors ------------------------------------------------------------------

CREATE OR REPLACE FUNCTION ffd_raise(d jsonb) RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN
	RAISE EXCEPTION USING
		ERRCODE = CASE d->>'code'{{range $code, $state := .States}} WHEN {{lit $code}} THEN {{lit $state}}{{end}} ELSE 'XX000' END,
		MESSAGE = d->>'message',
		DETAIL = d::text;
END
$fn$;

-- ffd_invalid raises a validation error, the value shortened as the Go
-- API's (fault.Invalid).
CREATE OR REPLACE FUNCTION ffd_invalid(kind text, field text, value text, detail text) RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE v text := CASE WHEN length(value) > {{.MaxValue}} THEN left(value, {{.MaxValue}}) || '…' ELSE value END;
BEGIN
	PERFORM ffd_raise(jsonb_build_object('code', 'validation', 'kind', kind, 'field', field, 'value', v,
		'detail', detail, 'message', format('invalid %s %s: %s', field, to_json(v)::text, detail)));
END
$fn$;

CREATE OR REPLACE FUNCTION ffd_not_found(object text, id text) RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN
	PERFORM ffd_raise(jsonb_build_object('code', 'not_found', 'object', object, 'id', id,
		'message', format('%s %s not found', object, id)));
END
$fn$;

CREATE OR REPLACE FUNCTION ffd_already_terminal(object text, id text, state text) RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN
	PERFORM ffd_raise(jsonb_build_object('code', 'already_terminal', 'object', object, 'id', id, 'state', state,
		'message', format('%s %s is already %s', object, id, state)));
END
$fn$;

-- Ids ---------------------------------------------------------------------

-- ffd_partition is the partition a uuid hashes to (ident.Partition), by
-- the schema's CRC-16 (ff_crc16, migration 00041).
CREATE OR REPLACE FUNCTION ffd_partition(u uuid) RETURNS smallint LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
	SELECT (ff_crc16(uuid_send(u)) % {{.Partitions}})::smallint
$fn$;

-- ffd_uuid7 mints a version 7 uuid (ident.NewUUID): time-ordered, so that
-- rows made together sit together in the btrees.
CREATE OR REPLACE FUNCTION ffd_uuid7() RETURNS uuid LANGUAGE sql VOLATILE AS $fn$
	SELECT encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
		PLACING substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
		FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid
$fn$;

-- ffd_uuid_in mints a version 7 uuid whose own partition is part
-- (ident.NewUUIDIn): its last two bytes solved for by ff_uuid_in_partition.
CREATE OR REPLACE FUNCTION ffd_uuid_in(part int) RETURNS uuid LANGUAGE sql VOLATILE AS $fn$
	SELECT ff_uuid_in_partition(ffd_uuid7(), part::smallint)
$fn$;

CREATE OR REPLACE FUNCTION ffd_id(part smallint, id uuid) RETURNS text LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
	SELECT '{fp:' || part || '}:' || id
$fn$;

-- ffd_parse_id reads an execution id, {fp:N}:<uuid>
-- (ffdtype.ParseExecutionID).
CREATE OR REPLACE FUNCTION ffd_parse_id(field text, s text, OUT part smallint, OUT id uuid) LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE m text[] := regexp_match(coalesce(s, ''), '^\{fp:([^}]*)\}:(.*)$');
BEGIN
	IF m IS NULL THEN
		PERFORM ffd_invalid('malformed_id', field, coalesce(s, ''), 'want {fp:N}:<uuid>');
	END IF;
	IF m[1] !~ '^(0|[1-9][0-9]{0,2})$' OR m[1]::int >= {{.Partitions}} THEN
		PERFORM ffd_invalid('malformed_id', field, s, 'partition must be a decimal in 0..{{.LastPartition}}');
	END IF;
	IF m[2] !~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN
		PERFORM ffd_invalid('malformed_id', field, s, 'want a canonical lowercase uuid after the partition');
	END IF;
	part := m[1]::smallint;
	id := m[2]::uuid;
END
$fn$;

CREATE OR REPLACE FUNCTION ffd_parse_uuid(field text, s text) RETURNS uuid LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
	IF coalesce(s, '') !~* '^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$' THEN
		PERFORM ffd_invalid('malformed_id', field, coalesce(s, ''), 'want a uuid');
	END IF;
	RETURN s::uuid;
END
$fn$;

-- JSON input ----------------------------------------------------------------

-- ffd_fields refuses p unless it is an object of the allowed keys only:
-- a misspelt key would otherwise be dropped in silence.
CREATE OR REPLACE FUNCTION ffd_fields(p jsonb, prefix text, allowed text[]) RETURNS void LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE k text;
BEGIN
	IF jsonb_typeof(p) IS DISTINCT FROM 'object' THEN
		PERFORM ffd_invalid('invalid_value', rtrim(coalesce(nullif(prefix, ''), 'params'), '.'), coalesce(p::text, 'null'), 'want a JSON object');
	END IF;
	SELECT key INTO k FROM jsonb_object_keys(p) AS key WHERE key <> ALL (allowed) ORDER BY key LIMIT 1;
	IF k IS NOT NULL THEN
		PERFORM ffd_invalid('invalid_value', prefix || k, k, 'not a field here; want one of ' || array_to_string(allowed, ', '));
	END IF;
END
$fn$;

-- ffd_text reads a string field ('' when absent or null).
CREATE OR REPLACE FUNCTION ffd_text(p jsonb, key text, field text) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
	IF p->key IS NULL OR jsonb_typeof(p->key) = 'null' THEN
		RETURN '';
	END IF;
	IF jsonb_typeof(p->key) <> 'string' THEN
		PERFORM ffd_invalid('invalid_value', field, (p->key)::text, 'want a JSON string');
	END IF;
	RETURN p->>key;
END
$fn$;

-- ffd_int reads an integer field (dflt when absent or null).
CREATE OR REPLACE FUNCTION ffd_int(p jsonb, key text, field text, dflt bigint) RETURNS bigint LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
	IF p->key IS NULL OR jsonb_typeof(p->key) = 'null' THEN
		RETURN dflt;
	END IF;
	IF jsonb_typeof(p->key) <> 'number' OR (p->>key)::numeric <> trunc((p->>key)::numeric)
		OR abs((p->>key)::numeric) > 9007199254740991 THEN
		PERFORM ffd_invalid('invalid_value', field, (p->key)::text, 'want an integer');
	END IF;
	RETURN (p->>key)::bigint;
END
$fn$;

-- ffd_micros reads a duration field in microseconds: a number of
-- milliseconds, or an interval as Postgres reads one ('30s', '5 minutes').
CREATE OR REPLACE FUNCTION ffd_micros(p jsonb, key text, field text) RETURNS bigint LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE i interval;
BEGIN
	CASE jsonb_typeof(p->key)
	WHEN 'number' THEN
		RETURN round((p->>key)::numeric * 1000)::bigint;
	WHEN 'string' THEN
		BEGIN
			i := (p->>key)::interval;
		EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow OR interval_field_overflow THEN
			PERFORM ffd_invalid('invalid_value', field, p->>key, 'want milliseconds, or an interval such as ''30s''');
		END;
		RETURN (extract(epoch FROM i) * 1000000)::bigint;
	ELSE
		IF p->key IS NOT NULL AND jsonb_typeof(p->key) <> 'null' THEN
			PERFORM ffd_invalid('invalid_value', field, (p->key)::text, 'want milliseconds, or an interval such as ''30s''');
		END IF;
		RETURN 0;
	END CASE;
END
$fn$;

CREATE OR REPLACE FUNCTION ffd_check_name(field text, v text) RETURNS void LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
	IF v !~ {{lit .L.NamePattern}} THEN
		PERFORM ffd_invalid('invalid_value', field, v, {{lit .L.NameDetail}});
	END IF;
END
$fn$;

CREATE OR REPLACE FUNCTION ffd_check_text(field text, v text, max int) RETURNS void LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
	IF octet_length(v) > max THEN
		PERFORM ffd_invalid('too_large', field, octet_length(v) || ' bytes', format('at most %s bytes', max));
	END IF;
END
$fn$;

-- ffd_max_payload is the payload limit: the setting ffd.max_payload_bytes
-- when set (as Config.MaxPayloadBytes sets a Go client's), else the Go
-- API's default.
CREATE OR REPLACE FUNCTION ffd_max_payload() RETURNS int LANGUAGE sql STABLE AS $fn$
	SELECT least(coalesce(nullif(current_setting('ffd.max_payload_bytes', true), '')::int, {{.L.DefaultMaxPayloadBytes}}), {{.L.MaxMaxPayloadBytes}})
$fn$;

-- ffd_json_bytes is a JSON value as the bytes the Go API stores for it;
-- NULL for none.
CREATE OR REPLACE FUNCTION ffd_json_bytes(v jsonb) RETURNS bytea LANGUAGE sql IMMUTABLE AS $fn$
	SELECT CASE WHEN v IS NULL OR jsonb_typeof(v) = 'null' THEN NULL ELSE convert_to(v::text, 'UTF8') END
$fn$;

-- ffd_bytes_json is stored bytes as JSON: the value when they are JSON,
-- else {"base64": ...}.
CREATE OR REPLACE FUNCTION ffd_bytes_json(b bytea) RETURNS jsonb LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
	IF b IS NULL OR length(b) = 0 THEN
		RETURN NULL;
	END IF;
	RETURN convert_from(b, 'UTF8')::jsonb;
EXCEPTION WHEN OTHERS THEN
	RETURN jsonb_build_object('base64', encode(b, 'base64'));
END
$fn$;

-- Creating ------------------------------------------------------------------

-- ffd_normalize checks one execution's parameters as the Go API's
-- leases.Normalize does, in its order, and fills its defaults; prefix
-- names a flow's node in the fields of its errors. Durations come back
-- in microseconds.
CREATE OR REPLACE FUNCTION ffd_normalize(p jsonb, prefix text, flow_ns text) RETURNS jsonb LANGUAGE plpgsql STABLE AS $fn$
DECLARE
	ns text := coalesce(nullif(ffd_text(p, 'namespace', prefix || 'namespace'), ''), flow_ns, {{lit .L.DefaultNamespace}});
	lane text := ffd_text(p, 'lane', prefix || 'lane');
	kind text := ffd_text(p, 'kind', prefix || 'kind');
	payload bytea := ffd_json_bytes(p->'payload');
	prio bigint := ffd_int(p, 'priority', prefix || 'priority', 0);
	caps jsonb := coalesce(nullif(p->'capabilities', 'null'::jsonb), '[]'::jsonb);
	attempts bigint := ffd_int(p, 'max_attempts', prefix || 'max_attempts', 0);
	ttl bigint := ffd_micros(p, 'lease_ttl', prefix || 'lease_ttl');
	timeout bigint := ffd_micros(p, 'attempt_timeout', prefix || 'attempt_timeout');
	deadline bigint := ffd_micros(p, 'deadline', prefix || 'deadline');
	delay bigint := ffd_micros(p, 'delay', prefix || 'delay');
	idem text := ffd_text(p, 'idempotency_key', prefix || 'idempotency_key');
	tags jsonb := coalesce(nullif(p->'tags', 'null'::jsonb), '{}'::jsonb);
	cap text;
BEGIN
	PERFORM ffd_check_name(prefix || 'namespace', ns);
	IF lane = '' THEN
		PERFORM ffd_invalid('required', prefix || 'lane', '', 'a lane is required');
	END IF;
	PERFORM ffd_check_name(prefix || 'lane', lane);
	IF lane = {{lit .SubflowLane}} THEN
		PERFORM ffd_invalid('invalid_value', prefix || 'lane', lane, 'the lane of sub-flow steps, which the daemon starts; give a SubmitNode a Flow to make one');
	END IF;
	PERFORM ffd_check_text(prefix || 'kind', kind, {{.L.MaxKindLength}});
	IF octet_length(payload) > ffd_max_payload() THEN
		PERFORM ffd_invalid('too_large', prefix || 'payload', octet_length(payload) || ' bytes', format('at most %s bytes', ffd_max_payload()));
	END IF;
	{{check .L.Ranges.priority "prio" "prio::text"}}
	IF jsonb_typeof(caps) <> 'array' OR EXISTS (SELECT 1 FROM jsonb_array_elements(caps) x WHERE jsonb_typeof(x) <> 'string') THEN
		PERFORM ffd_invalid('invalid_value', prefix || 'required_capabilities', caps::text, 'want an array of strings');
	END IF;
	IF jsonb_array_length(caps) > {{.L.MaxCapabilities}} THEN
		PERFORM ffd_invalid('too_large', prefix || 'required_capabilities', jsonb_array_length(caps) || ' capabilities', 'at most {{.L.MaxCapabilities}}');
	END IF;
	FOR cap IN SELECT jsonb_array_elements_text(caps) LOOP
		IF cap = '' OR octet_length(cap) > {{.L.MaxCapabilityLength}} THEN
			PERFORM ffd_invalid('invalid_value', prefix || 'required_capabilities', cap, 'each capability is 1 to {{.L.MaxCapabilityLength}} bytes');
		END IF;
		IF starts_with(cap, {{lit .L.VersionCapabilityPrefix}}) THEN
			PERFORM ffd_invalid('invalid_value', prefix || 'required_capabilities', cap, 'a version''s capability; name the version in Version');
		END IF;
	END LOOP;
	IF attempts = 0 THEN
		attempts := {{.L.DefaultMaxAttempts}};
	END IF;
	{{check .L.Ranges.max_attempts "attempts" "attempts::text"}}
	IF ttl = 0 THEN
		ttl := {{us .L.DefaultLeaseTTL}};
	END IF;
	{{check .L.Ranges.lease_ttl "ttl" "(p->'lease_ttl')::text"}}
	{{check .L.Ranges.attempt_timeout "timeout" "(p->'attempt_timeout')::text"}}
	{{check .L.Ranges.deadline "deadline" "(p->'deadline')::text"}}
	{{check .L.Ranges.delay "delay" "(p->'delay')::text"}}
	PERFORM ffd_check_text(prefix || 'idempotency_key', idem, {{.L.MaxIdempotencyKey}});
	IF jsonb_typeof(tags) <> 'object' THEN
		PERFORM ffd_invalid('invalid_value', prefix || 'tags', tags::text, 'must encode as a JSON object');
	END IF;
	IF octet_length(tags::text) > {{.L.MaxTagsBytes}} THEN
		PERFORM ffd_invalid('too_large', prefix || 'tags', octet_length(tags::text) || ' bytes', 'at most {{.L.MaxTagsBytes}} bytes of JSON');
	END IF;
	RETURN jsonb_build_object('namespace', ns, 'lane', lane, 'kind', kind, 'payload', encode(coalesce(payload, ''), 'base64'),
		'priority', prio, 'caps', caps, 'max_attempts', attempts, 'ttl', ttl, 'timeout', timeout, 'deadline', deadline,
		'delay', delay, 'idempotency_key', idem, 'tags', tags);
END
$fn$;

-- The keys of one execution's parameters.
CREATE OR REPLACE FUNCTION ffd_create_keys() RETURNS text[] LANGUAGE sql IMMUTABLE AS $fn$
	SELECT ARRAY['namespace', 'lane', 'kind', 'payload', 'priority', 'capabilities', 'max_attempts', 'lease_ttl',
		'attempt_timeout', 'deadline', 'delay', 'idempotency_key', 'tags']
$fn$;

-- ffd_execution_json is what the API answers of an execution.
CREATE OR REPLACE FUNCTION ffd_execution_json(r record) RETURNS jsonb LANGUAGE plpgsql STABLE AS $fn$
BEGIN
	RETURN jsonb_build_object('id', ffd_id(r.partition_key, r.execution_id), 'flow_id', r.flow_id,
		'namespace', r.namespace, 'lane', r.lane, 'kind', r.kind, 'state', r.state, 'step', r.step,
		'attempt', r.attempt, 'max_attempts', r.max_attempts, 'run_at', r.run_at, 'created_at', r.created_at,
		'terminal_at', r.terminal_at, 'payload', ffd_bytes_json(r.payload), 'result', ffd_bytes_json(r.result),
		'last_error', r.last_error, 'cancellation_reason', r.cancellation_reason);
END
$fn$;

-- ffd_notify sends notifications as the Go API's writes do (Notices).
CREATE OR REPLACE FUNCTION ffd_notify(channels text[], payloads text[]) RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN
	IF cardinality(channels) > 0 THEN
		EXECUTE {{q .S.Notify}} USING channels, payloads;
	END IF;
END
$fn$;

-- ffd_create creates one execution (Client.Create): with an idempotency
-- key already used in its namespace it creates nothing and answers the
-- execution holding the key, existed true.
CREATE OR REPLACE FUNCTION ffd_create(params jsonb) RETURNS jsonb LANGUAGE plpgsql AS $fn$
DECLARE
	n jsonb;
	part smallint;
	eid uuid;
	r record;
	existed boolean := false;
	caps text[];
	inserted int;
BEGIN
	PERFORM ffd_fields(params, '', ffd_create_keys());
	n := ffd_normalize(params, '', NULL);
	IF n->>'idempotency_key' <> '' THEN
		part := ff_key_partition(n->>'namespace', n->>'idempotency_key');
		eid := ffd_uuid_in(part);
	ELSE
		eid := ffd_uuid7();
		part := ffd_partition(eid);
	END IF;
	caps := ARRAY(SELECT jsonb_array_elements_text(n->'caps'));
	EXECUTE CASE WHEN n->>'idempotency_key' <> '' THEN {{rows .S.InsertKeyed}} ELSE {{rows .S.InsertExecution}} END INTO r
		USING part, eid, NULL::uuid, n->>'namespace', n->>'lane', n->>'kind', (n->>'priority')::int, caps, 'pending',
			(n->>'delay')::bigint, (n->>'max_attempts')::int, {{us .L.DefaultBackoffBase}}::bigint, {{us .L.DefaultBackoffMax}}::bigint,
			{{.L.DefaultBackoffFactor}}::float8, {{.L.DefaultBackoffJitter}}::float8, (n->>'ttl')::bigint, (n->>'timeout')::bigint,
			(n->>'deadline')::bigint, decode(n->>'payload', 'base64'), nullif(n->>'idempotency_key', ''), n->'tags',
			NULL::text, NULL::text, false, NULL::text, NULL::bigint;
	GET DIAGNOSTICS inserted = ROW_COUNT;
	IF inserted = 0 THEN
		EXECUTE {{q .S.KeyHolder}} INTO r USING n->>'namespace', n->>'idempotency_key', part;
		existed := true;
	ELSIF (n->>'delay')::bigint = 0 THEN
		PERFORM ffd_notify(ARRAY[{{lit .ChannelReady}}], ARRAY[n->>'lane']);
	END IF;
	RETURN ffd_execution_json(r) || jsonb_build_object('existed', existed);
END
$fn$;

-- ffd_create_many creates executions in one statement (Client.CreateMany)
-- and answers their ids in the order given.
CREATE OR REPLACE FUNCTION ffd_create_many(params jsonb) RETURNS jsonb LANGUAGE plpgsql AS $fn$
DECLARE
	total int;
	n jsonb;
	parts smallint[] := '{}'; ids uuid[] := '{}'; flows uuid[] := '{}';
	nss text[] := '{}'; lanes text[] := '{}'; kinds text[] := '{}'; prios int[] := '{}'; caps jsonb[] := '{}';
	states text[] := '{}'; delays bigint[] := '{}'; attempts int[] := '{}'; bases bigint[] := '{}';
	maxes bigint[] := '{}'; mults float8[] := '{}'; jitters float8[] := '{}'; ttls bigint[] := '{}';
	timeouts bigint[] := '{}'; deadlines bigint[] := '{}'; payloads bytea[] := '{}'; tagss jsonb[] := '{}';
	steps text[] := '{}'; ckeys text[] := '{}'; seqs bigint[] := '{}';
	ready text[] := '{}';
	inserted int;
BEGIN
	IF jsonb_typeof(params) IS DISTINCT FROM 'array' THEN
		PERFORM ffd_invalid('invalid_value', 'executions', coalesce(params::text, 'null'), 'want a JSON array of executions');
	END IF;
	total := jsonb_array_length(params);
	IF total > {{.L.MaxCreateMany}} THEN
		PERFORM ffd_invalid('too_large', 'executions', total::text, 'at most {{.L.MaxCreateMany}} per CreateMany');
	END IF;
	FOR i IN 0 .. total - 1 LOOP
		PERFORM ffd_fields(params->i, '', ffd_create_keys());
		n := ffd_normalize(params->i, '', NULL);
		IF n->>'idempotency_key' <> '' THEN
			PERFORM ffd_invalid('invalid_value', 'idempotency_key', n->>'idempotency_key', 'not supported in a batch create');
		END IF;
		ids := ids || ffd_uuid7();
		parts := parts || ffd_partition(ids[i + 1]);
		flows := flows || NULL::uuid; nss := nss || (n->>'namespace'); lanes := lanes || (n->>'lane');
		kinds := kinds || (n->>'kind'); prios := prios || (n->>'priority')::int; caps := caps || (n->'caps');
		states := states || 'pending'::text; delays := delays || (n->>'delay')::bigint;
		attempts := attempts || (n->>'max_attempts')::int; bases := bases || {{us .L.DefaultBackoffBase}}::bigint;
		maxes := maxes || {{us .L.DefaultBackoffMax}}::bigint; mults := mults || {{.L.DefaultBackoffFactor}}::float8;
		jitters := jitters || {{.L.DefaultBackoffJitter}}::float8; ttls := ttls || (n->>'ttl')::bigint;
		timeouts := timeouts || (n->>'timeout')::bigint; deadlines := deadlines || (n->>'deadline')::bigint;
		payloads := payloads || decode(n->>'payload', 'base64'); tagss := tagss || (n->'tags');
		steps := steps || ''::text; ckeys := ckeys || ''::text; seqs := seqs || NULL::bigint;
		IF (n->>'delay')::bigint = 0 AND NOT (n->>'lane') = ANY (ready) THEN
			ready := ready || (n->>'lane');
		END IF;
	END LOOP;
	IF total = 0 THEN
		RETURN '[]'::jsonb;
	END IF;
	EXECUTE 'WITH ins AS (' || {{q .S.InsertMany}} || ') SELECT count(*) FROM ins' INTO inserted
		USING parts, ids, flows, nss, lanes, kinds, prios, caps, states, delays, attempts, bases, maxes, mults,
			jitters, ttls, timeouts, deadlines, payloads, tagss, steps, ckeys, seqs;
	PERFORM ffd_notify(array_fill({{lit .ChannelReady}}::text, ARRAY[cardinality(ready)]), ready);
	RETURN (SELECT jsonb_agg(ffd_id(p, u) ORDER BY o) FROM unnest(parts, ids) WITH ORDINALITY AS x(p, u, o));
END
$fn$;

-- Flows ---------------------------------------------------------------------

-- ffd_policy checks a node's join policy and fills its defaults
-- (flows.NormalizePolicy).
CREATE OR REPLACE FUNCTION ffd_policy(p jsonb, prefix text) RETURNS jsonb LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE kind text; k bigint; on_sat text;
BEGIN
	PERFORM ffd_fields(p, prefix || 'policy.', ARRAY['kind', 'k', 'on_satisfied']);
	kind := coalesce(nullif(ffd_text(p, 'kind', prefix || 'policy'), ''), 'all_of');
	k := ffd_int(p, 'k', prefix || 'k', 0);
	on_sat := ffd_text(p, 'on_satisfied', prefix || 'on_satisfied');
	IF kind NOT IN ('all_of', 'any_of', 'quorum') THEN
		PERFORM ffd_invalid('invalid_value', prefix || 'policy', kind, 'want all_of, any_of or quorum');
	END IF;
	IF kind = 'quorum' AND k < 1 THEN
		PERFORM ffd_invalid('out_of_range', prefix || 'k', k::text, 'quorum needs k ≥ 1');
	ELSIF kind <> 'quorum' AND k <> 0 THEN
		PERFORM ffd_invalid('invalid_value', prefix || 'k', k::text, format('k applies to quorum only, not %s', kind));
	END IF;
	IF kind = 'all_of' AND on_sat <> '' THEN
		PERFORM ffd_invalid('invalid_value', prefix || 'on_satisfied', on_sat, 'all_of has no on_satisfied: nothing remains once all succeeded');
	ELSIF kind <> 'all_of' AND on_sat = '' THEN
		on_sat := 'let_run';
	ELSIF kind <> 'all_of' AND on_sat NOT IN ('cancel_remaining', 'let_run') THEN
		PERFORM ffd_invalid('invalid_value', prefix || 'on_satisfied', on_sat, 'want cancel_remaining or let_run');
	END IF;
	RETURN jsonb_build_object('kind', kind, 'k', CASE WHEN kind = 'quorum' THEN k END, 'on_satisfied', nullif(on_sat, ''));
END
$fn$;

-- ffd_flow_graph checks a submission's nodes and edges as flows.graphOf
-- does (sizes, refs, edge ends, self and duplicate edges, cycles) and
-- answers each node's in-degree and the edges as node numbers (1-based,
-- in the order given).
CREATE OR REPLACE FUNCTION ffd_flow_graph(nodes jsonb, edges jsonb) RETURNS jsonb LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
	n int := jsonb_array_length(nodes);
	m int := jsonb_array_length(edges);
	bad record;
	idx jsonb;
	ef int[]; et int[]; byfrom int[]; starts int[]; deg int[]; queue int[] := '{}';
	head int := 1; cur int;
BEGIN
	IF n NOT BETWEEN 1 AND {{.L.MaxSubmitNodes}} THEN
		PERFORM ffd_invalid('out_of_range', 'nodes', n::text, 'want 1..{{.L.MaxSubmitNodes}} nodes');
	END IF;
	IF m > {{.L.MaxSubmitEdges}} THEN
		PERFORM ffd_invalid('out_of_range', 'edges', m::text, 'want at most {{.L.MaxSubmitEdges}} edges');
	END IF;
	SELECT s.ref, s.rn INTO bad FROM (
		SELECT o, coalesce(x->>'ref', '') AS ref, row_number() OVER (PARTITION BY x->>'ref' ORDER BY o) AS rn
		FROM jsonb_array_elements(nodes) WITH ORDINALITY AS t(x, o)) s
	WHERE s.ref = '' OR octet_length(s.ref) > {{.L.MaxNameLength}} OR s.rn > 1 ORDER BY s.o LIMIT 1;
	IF FOUND AND (bad.ref = '' OR octet_length(bad.ref) > {{.L.MaxNameLength}}) THEN
		PERFORM ffd_invalid('invalid_value', 'nodes.ref', bad.ref, 'want 1 to {{.L.MaxNameLength}} bytes');
	ELSIF FOUND THEN
		PERFORM ffd_invalid('invalid_value', 'nodes.ref', bad.ref, 'duplicate node ref');
	END IF;
	SELECT jsonb_object_agg(x->>'ref', o) INTO idx FROM jsonb_array_elements(nodes) WITH ORDINALITY AS t(x, o);
	SELECT s.* INTO bad FROM (
		SELECT o, coalesce(e->>'from', '') AS fr, coalesce(e->>'to', '') AS tr,
			(idx->>(e->>'from'))::int AS f, (idx->>(e->>'to'))::int AS t,
			row_number() OVER (PARTITION BY idx->>(e->>'from'), idx->>(e->>'to') ORDER BY o) AS rn
		FROM jsonb_array_elements(edges) WITH ORDINALITY AS t(e, o)) s
	WHERE s.f IS NULL OR s.t IS NULL OR s.f = s.t OR s.rn > 1 ORDER BY s.o LIMIT 1;
	IF FOUND THEN
		IF bad.f IS NULL THEN
			PERFORM ffd_invalid('invalid_value', 'edges.from', bad.fr, 'no node has this ref');
		ELSIF bad.t IS NULL THEN
			PERFORM ffd_invalid('invalid_value', 'edges.to', bad.tr, 'no node has this ref');
		ELSIF bad.f = bad.t THEN
			PERFORM ffd_invalid('invalid_value', 'edges', bad.fr || ' -> ' || bad.tr, 'an edge cannot join a node to itself');
		END IF;
		PERFORM ffd_invalid('invalid_value', 'edges', bad.fr || ' -> ' || bad.tr, 'duplicate edge');
	END IF;
	SELECT coalesce(array_agg((idx->>(e->>'from'))::int ORDER BY o), '{}'), coalesce(array_agg((idx->>(e->>'to'))::int ORDER BY o), '{}')
		INTO ef, et FROM jsonb_array_elements(edges) WITH ORDINALITY AS t(e, o);
	-- Kahn's algorithm, as flows.cycleRef: what it cannot reach is on or
	-- behind a cycle; the first such node in order is named.
	deg := array_fill(0, ARRAY[n]);
	starts := array_fill(0, ARRAY[n + 1]);
	FOR j IN 1 .. m LOOP
		deg[et[j]] := deg[et[j]] + 1;
		starts[ef[j] + 1] := starts[ef[j] + 1] + 1;
	END LOOP;
	starts[1] := 1;
	FOR i IN 2 .. n + 1 LOOP
		starts[i] := starts[i] + starts[i - 1];
	END LOOP;
	SELECT coalesce(array_agg(et[j] ORDER BY ef[j], j), '{}') INTO byfrom FROM generate_series(1, m) AS j;
	FOR i IN 1 .. n LOOP
		IF deg[i] = 0 THEN
			queue := queue || i;
		END IF;
	END LOOP;
	WHILE head <= cardinality(queue) LOOP
		cur := queue[head];
		head := head + 1;
		FOR j IN starts[cur] .. starts[cur + 1] - 1 LOOP
			deg[byfrom[j]] := deg[byfrom[j]] - 1;
			IF deg[byfrom[j]] = 0 THEN
				queue := queue || byfrom[j];
			END IF;
		END LOOP;
	END LOOP;
	IF cardinality(queue) < n THEN
		FOR i IN 1 .. n LOOP
			IF deg[i] > 0 THEN
				PERFORM ffd_invalid('cycle', 'edges', nodes->(i - 1)->>'ref', 'the edges form a cycle through this node');
			END IF;
		END LOOP;
	END IF;
	SELECT array_fill(0, ARRAY[n]) INTO deg;
	FOR j IN 1 .. m LOOP
		deg[et[j]] := deg[et[j]] + 1;
	END LOOP;
	RETURN jsonb_build_object('indeg', to_jsonb(deg), 'from', to_jsonb(ef), 'to', to_jsonb(et));
END
$fn$;

-- ffd_submit_flow submits a flow (Client.SubmitFlow): its nodes, edges
-- and joins, in one call. Sub-flows, compensations and versions are the
-- Go API's alone (docs/sql.md).
CREATE OR REPLACE FUNCTION ffd_submit_flow(params jsonb) RETURNS jsonb LANGUAGE plpgsql AS $fn$
DECLARE
	fid uuid;
	ns text;
	kind text;
	tags jsonb := coalesce(nullif(params->'tags', 'null'::jsonb), '{}'::jsonb);
	nodes jsonb := params->'nodes';
	edges jsonb := coalesce(nullif(params->'edges', 'null'::jsonb), '[]'::jsonb);
	g jsonb; node jsonb; x jsonb; pol jsonb;
	part smallint; total int; ref text; prefix text; deg int; cnt int;
	ids uuid[] := '{}'; nss text[] := '{}'; lanes text[] := '{}'; kinds text[] := '{}'; prios int[] := '{}';
	caps jsonb[] := '{}'; states text[] := '{}'; delays bigint[] := '{}'; attempts int[] := '{}';
	ttls bigint[] := '{}'; timeouts bigint[] := '{}'; deadlines bigint[] := '{}'; payloads bytea[] := '{}';
	tagss jsonb[] := '{}'; steps text[] := '{}';
	gdowns uuid[] := '{}'; gkinds text[] := '{}'; gks int[] := '{}'; gons text[] := '{}'; gtotals int[] := '{}';
	eids uuid[] := '{}'; ready text[] := '{}';
	r record;
	answer jsonb := '{}';
BEGIN
	PERFORM ffd_fields(params, '', ARRAY['id', 'namespace', 'kind', 'tags', 'nodes', 'edges']);
	IF jsonb_typeof(nodes) IS DISTINCT FROM 'array' THEN
		PERFORM ffd_invalid('invalid_value', 'nodes', coalesce(nodes::text, 'null'), 'want a JSON array of nodes');
	END IF;
	IF jsonb_typeof(edges) <> 'array' THEN
		PERFORM ffd_invalid('invalid_value', 'edges', edges::text, 'want a JSON array of edges');
	END IF;
	FOR i IN 0 .. jsonb_array_length(nodes) - 1 LOOP
		PERFORM ffd_fields(nodes->i, 'nodes.', ARRAY['ref', 'policy'] || ffd_create_keys());
		PERFORM ffd_text(nodes->i, 'ref', 'nodes.ref');
	END LOOP;
	FOR i IN 0 .. jsonb_array_length(edges) - 1 LOOP
		PERFORM ffd_fields(edges->i, 'edges.', ARRAY['from', 'to']);
		PERFORM ffd_text(edges->i, 'from', 'edges.from'), ffd_text(edges->i, 'to', 'edges.to');
	END LOOP;
	fid := CASE WHEN ffd_text(params, 'id', 'flow.id') = '' THEN ffd_uuid7() ELSE ffd_parse_uuid('flow.id', params->>'id') END;
	ns := coalesce(nullif(ffd_text(params, 'namespace', 'namespace'), ''), {{lit .L.DefaultNamespace}});
	PERFORM ffd_check_name('namespace', ns);
	kind := ffd_text(params, 'kind', 'kind');
	IF octet_length(kind) > {{.L.MaxKindLength}} THEN
		PERFORM ffd_invalid('too_large', 'kind', kind, 'at most {{.L.MaxKindLength}} bytes');
	END IF;
	IF jsonb_typeof(tags) <> 'object' THEN
		PERFORM ffd_invalid('invalid_value', 'tags', tags::text, 'must encode as a JSON object');
	END IF;
	g := ffd_flow_graph(nodes, edges);
	part := ffd_partition(fid);
	total := jsonb_array_length(nodes);
	FOR i IN 1 .. total LOOP
		node := nodes->(i - 1);
		ref := node->>'ref';
		prefix := 'nodes[' || ref || '].';
		deg := (g->'indeg'->>(i - 1))::int;
		IF coalesce(jsonb_typeof(node->'policy'), 'null') <> 'null' AND deg = 0 THEN
			PERFORM ffd_invalid('invalid_value', 'nodes.policy', ref, 'a node without incoming edges has no join policy');
		END IF;
		ids := ids || ffd_uuid7();
		IF deg > 0 THEN
			pol := ffd_policy(coalesce(nullif(node->'policy', 'null'::jsonb), '{}'::jsonb), prefix);
			IF pol->>'kind' = 'quorum' AND (pol->>'k')::int > deg THEN
				PERFORM ffd_invalid('out_of_range', 'k', pol->>'k', format('node %s has %s incoming edges; a quorum of %s can never be met', ref, deg, pol->>'k'));
			END IF;
			gdowns := gdowns || ids[i]; gkinds := gkinds || (pol->>'kind'); gks := gks || (pol->>'k')::int;
			gons := gons || (pol->>'on_satisfied'); gtotals := gtotals || deg;
		END IF;
		IF ffd_text(node, 'idempotency_key', prefix || 'idempotency_key') <> '' THEN
			PERFORM ffd_invalid('invalid_value', 'idempotency_key', node->>'idempotency_key', 'node ' || ref || ': use the flow id to make a submission idempotent');
		END IF;
		x := ffd_normalize(node - 'ref' - 'policy', prefix, ns);
		nss := nss || (x->>'namespace'); lanes := lanes || (x->>'lane'); kinds := kinds || (x->>'kind');
		prios := prios || (x->>'priority')::int; caps := caps || (x->'caps');
		states := states || CASE WHEN deg > 0 THEN 'blocked' ELSE 'pending' END;
		delays := delays || (x->>'delay')::bigint; attempts := attempts || (x->>'max_attempts')::int;
		ttls := ttls || (x->>'ttl')::bigint; timeouts := timeouts || (x->>'timeout')::bigint;
		deadlines := deadlines || (x->>'deadline')::bigint; payloads := payloads || decode(x->>'payload', 'base64');
		tagss := tagss || (x->'tags'); steps := steps || ref;
		IF deg = 0 AND (x->>'delay')::bigint = 0 AND NOT (x->>'lane') = ANY (ready) THEN
			ready := ready || (x->>'lane');
		END IF;
		answer := answer || jsonb_build_object(ref, ffd_id(part, ids[i]));
	END LOOP;
	EXECUTE {{rows .S.InsertFlow}} INTO r USING part, fid, ns, kind, tags, ''::text;
	GET DIAGNOSTICS cnt = ROW_COUNT;
	IF cnt = 0 THEN
		PERFORM ffd_raise(jsonb_build_object('code', 'conflict', 'object', 'flow', 'id', fid, 'reason', 'a flow with this id already exists',
			'message', format('flow %s: a flow with this id already exists', fid)));
	END IF;
	EXECUTE 'WITH ins AS (' || {{q .S.InsertMany}} || ') SELECT count(*) FROM ins' INTO cnt
		USING array_fill(part, ARRAY[total]), ids, array_fill(fid, ARRAY[total]), nss, lanes, kinds, prios, caps, states,
			delays, attempts, array_fill({{us .L.DefaultBackoffBase}}::bigint, ARRAY[total]),
			array_fill({{us .L.DefaultBackoffMax}}::bigint, ARRAY[total]), array_fill({{.L.DefaultBackoffFactor}}::float8, ARRAY[total]),
			array_fill({{.L.DefaultBackoffJitter}}::float8, ARRAY[total]), ttls, timeouts, deadlines, payloads, tagss, steps,
			array_fill(''::text, ARRAY[total]), array_fill(NULL::bigint, ARRAY[total]);
	FOR j IN 1 .. jsonb_array_length(edges) LOOP
		eids := eids || ffd_uuid7();
	END LOOP;
	EXECUTE {{q .S.InsertAppliedEdges}} USING part, fid, eids,
		ARRAY(SELECT ids[f::int] FROM jsonb_array_elements_text(g->'from') WITH ORDINALITY AS ef(f, o) ORDER BY o),
		ARRAY(SELECT ids[t::int] FROM jsonb_array_elements_text(g->'to') WITH ORDINALITY AS et(t, o) ORDER BY o),
		array_fill({{lit .L.DefaultDependencyKind}}::text, ARRAY[cardinality(eids)]), array_fill(NULL::text, ARRAY[cardinality(eids)]);
	EXECUTE {{q .S.InsertGroups}} USING part, fid, gdowns, gkinds, gks, gons, gtotals;
	EXECUTE {{rows .S.SetFlowSize}} INTO r USING part, fid, total, cardinality(eids);
	PERFORM ffd_notify(array_fill({{lit .ChannelReady}}::text, ARRAY[cardinality(ready)]), ready);
	RETURN jsonb_build_object('flow_id', fid, 'executions', answer);
END
$fn$;

-- Cancelling ----------------------------------------------------------------

-- ffd_distributed reports whether ff_execution is distributed by a
-- distributed Postgres (store.Distributed): there the ending takes its
-- routed form.
CREATE OR REPLACE FUNCTION ffd_distributed() RETURNS boolean LANGUAGE plpgsql STABLE AS $fn$
DECLARE dist boolean := false;
BEGIN
	IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
		-- pg_dist_partition exists only where the extension is.
		EXECUTE 'SELECT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = to_regclass(''ff_execution'') AND partmethod = ''h'')' INTO dist;
	END IF;
	RETURN dist;
END
$fn$;

-- ffd_end ends executions of one partition as cancelled through the Go
-- API's ending (store.Terminate): the fenced update, the events, the
-- flows it finishes, and the notifications; it answers the rows it
-- ended. On a distributed Postgres it runs the routed form, narrowed to
-- the partition's shard, and finishes the flows by name after it, as
-- store.terminateRouted does.
CREATE OR REPLACE FUNCTION ffd_end(parts smallint[], ids uuid[], reason text, by_whom text) RETURNS SETOF record LANGUAGE plpgsql AS $fn$
DECLARE
	n int := cardinality(ids);
	e record;
	flows uuid[] := '{}';
BEGIN
	IF NOT ffd_distributed() THEN
		RETURN QUERY EXECUTE {{q .S.Terminate}} USING parts, ids, array_fill(0::bigint, ARRAY[n]),
			array_fill('cancelled'::text, ARRAY[n]), array_fill(NULL::bytea, ARRAY[n]), array_fill(NULL::text, ARRAY[n]),
			array_fill(reason, ARRAY[n]), array_fill(by_whom, ARRAY[n]), array_fill({{lit .OutcomeCancelled}}::text, ARRAY[n]),
			array_fill({{lit .LeaseEndCancelled}}::text, ARRAY[n]);
		EXECUTE {{q .S.FinishFlows}};
	ELSE
		FOR e IN EXECUTE {{q .S.TerminateRouted}} USING parts, ids, array_fill(0::bigint, ARRAY[n]),
			array_fill('cancelled'::text, ARRAY[n]), array_fill(NULL::bytea, ARRAY[n]), array_fill(NULL::text, ARRAY[n]),
			array_fill(reason, ARRAY[n]), array_fill(by_whom, ARRAY[n]), array_fill({{lit .OutcomeCancelled}}::text, ARRAY[n]),
			array_fill({{lit .LeaseEndCancelled}}::text, ARRAY[n]), ARRAY[parts[1]]
		LOOP
			IF e.flow_id IS NOT NULL AND NOT e.flow_id = ANY (flows) THEN
				flows := flows || e.flow_id;
			END IF;
			RETURN NEXT e;
		END LOOP;
		IF cardinality(flows) > 0 THEN
			EXECUTE {{q .S.LockFlowsRouted}} USING parts[1], flows;
			EXECUTE {{q .S.FinishFlowsRouted}} USING parts[1], flows;
		END IF;
	END IF;
	PERFORM ffd_notify(
		array_fill({{lit .ChannelCompletion}}::text, ARRAY[n]) || array_fill({{lit .ChannelRevoke}}::text, ARRAY[n]) || array_fill({{lit .ChannelLease}}::text, ARRAY[n]),
		ARRAY(SELECT p::text FROM unnest(parts) p) || ARRAY(SELECT p || ':' || u || ':0' FROM unnest(parts, ids) AS x(p, u))
			|| ARRAY(SELECT p::text FROM unnest(parts) p));
END
$fn$;

-- ffd_cancel cancels an execution (Client.Cancel): a running one is
-- fenced and its worker told; a repeat answers repeated.
CREATE OR REPLACE FUNCTION ffd_cancel(execution_id text, reason text DEFAULT NULL, cancelled_by text DEFAULT NULL) RETURNS jsonb LANGUAGE plpgsql AS $fn$
DECLARE
	x record;
	e record;
	r record;
BEGIN
	SELECT * INTO x FROM ffd_parse_id('execution_id', execution_id);
	PERFORM ffd_check_text('reason', coalesce(reason, ''), {{.L.MaxReasonBytes}});
	PERFORM ffd_check_text('by', coalesce(cancelled_by, ''), {{.L.MaxByBytes}});
	SELECT * INTO e FROM ffd_end(ARRAY[x.part], ARRAY[x.id], coalesce(nullif(reason, ''), {{lit .L.DefaultCancelReason}}),
		coalesce(nullif(cancelled_by, ''), {{lit .L.DefaultCancelledBy}}))
		AS t(partition_key smallint, execution_id uuid, flow_id uuid, state text, attempt int, lease_epoch bigint, was_running boolean, event_id bigint);
	IF FOUND THEN
		RETURN jsonb_build_object('state', 'cancelled', 'attempt', e.attempt, 'repeated', false);
	END IF;
	EXECUTE {{q .S.GetExecution}} INTO r USING x.part, x.id;
	IF r.execution_id IS NULL THEN
		PERFORM ffd_not_found('execution', ffd_id(x.part, x.id));
	ELSIF r.state = 'cancelled' THEN
		RETURN jsonb_build_object('state', 'cancelled', 'attempt', r.attempt, 'repeated', true);
	END IF;
	PERFORM ffd_already_terminal('execution', ffd_id(x.part, x.id), r.state);
	RETURN NULL;
END
$fn$;

-- ffd_cancel_flow cancels a flow (Client.CancelFlow) with a policy:
-- flow_only, cancel_all (the default) or cancel_pending.
CREATE OR REPLACE FUNCTION ffd_cancel_flow(flow_id text, policy text DEFAULT 'cancel_all', reason text DEFAULT NULL) RETURNS jsonb LANGUAGE plpgsql AS $fn$
DECLARE
	fid uuid;
	part smallint;
	f record;
	states text[];
	members uuid[] := '{}';
BEGIN
	states := CASE coalesce(policy, '') WHEN 'flow_only' THEN '{}'::text[] WHEN 'cancel_all' THEN ARRAY['blocked', 'pending', 'running']
		WHEN 'cancel_pending' THEN ARRAY['blocked', 'pending'] END;
	IF states IS NULL THEN
		PERFORM ffd_invalid('invalid_value', 'policy', coalesce(policy, ''), 'want flow_only, cancel_all or cancel_pending');
	END IF;
	fid := ffd_parse_uuid('flow_id', flow_id);
	part := ffd_partition(fid);
	reason := coalesce(nullif(reason, ''), {{lit .L.FlowCancelReason}});
	FOR i IN 1 .. 2 LOOP
		-- As flows.Cancel: read the flow, lock its members, then lock the
		-- flow (the global lock order) and read it again.
		IF i = 1 THEN
			SELECT ff.state, ff.cancellation_policy, ff.cancelled_members INTO f FROM ff_flow ff WHERE ff.partition_key = part AND ff.flow_id = fid;
		ELSE
			IF cardinality(states) > 0 THEN
				EXECUTE 'SELECT coalesce(array_agg(execution_id), ''{}'') FROM (' || {{q .S.LockMembers}} || ') m' INTO members USING part, fid, states;
			END IF;
			EXECUTE 'SELECT state, cancellation_policy, cancelled_members FROM (' || {{q .S.LockFlow}} || ') f' INTO f USING part, fid;
		END IF;
		IF f.state IS NULL THEN
			PERFORM ffd_not_found('flow', fid::text);
		ELSIF f.state = 'cancelled' THEN
			RETURN jsonb_build_object('policy', f.cancellation_policy, 'repeated', true,
				'members', (SELECT coalesce(jsonb_agg(ffd_id(part, m)), '[]') FROM unnest(f.cancelled_members) m));
		ELSIF f.state <> 'open' THEN
			PERFORM ffd_already_terminal('flow', fid::text, f.state);
		END IF;
	END LOOP;
	EXECUTE {{q .S.CancelFlow}} USING part, fid, policy, reason, members, {{lit .OutcomeCancelled}}::text;
	PERFORM ffd_notify(ARRAY[{{lit .ChannelCompletion}}], ARRAY['']);
	IF cardinality(members) > 0 THEN
		PERFORM count(*) FROM ffd_end(array_fill(part, ARRAY[cardinality(members)]), members, reason, {{lit .L.FlowCancelledBy}})
			AS t(partition_key smallint, execution_id uuid, flow_id uuid, state text, attempt int, lease_epoch bigint, was_running boolean, event_id bigint);
	END IF;
	RETURN jsonb_build_object('policy', policy, 'repeated', false,
		'members', (SELECT coalesce(jsonb_agg(ffd_id(part, m)), '[]') FROM unnest(members) m));
END
$fn$;

-- Signals and events ----------------------------------------------------------

-- ffd_signal sends a signal to a flow or an execution (Client.Signal): it
-- ends the wait of the first that waits for it, or is kept for the first
-- wait to come.
CREATE OR REPLACE FUNCTION ffd_signal(params jsonb) RETURNS jsonb LANGUAGE plpgsql AS $fn$
DECLARE
	name text;
	payload bytea;
	part smallint; sflow uuid; sexec uuid;
	x record; r record;
	sent timestamptz; woke uuid; lane text;
	sid uuid := ffd_uuid7();
BEGIN
	PERFORM ffd_fields(params, '', ARRAY['flow_id', 'execution_id', 'name', 'payload']);
	name := ffd_text(params, 'name', 'name');
	PERFORM ffd_check_name('name', name);
	payload := coalesce(ffd_json_bytes(params->'payload'), ''::bytea);
	IF octet_length(payload) > ffd_max_payload() THEN
		PERFORM ffd_invalid('too_large', 'payload', octet_length(payload) || ' bytes', format('at most %s bytes (the client''s MaxPayloadBytes)', ffd_max_payload()));
	END IF;
	IF (ffd_text(params, 'flow_id', 'flow_id') = '') = (ffd_text(params, 'execution_id', 'execution') = '') THEN
		PERFORM ffd_invalid('invalid_value', 'flow_id', '', 'send a signal to a flow or to an execution: set exactly one of flow_id and execution');
	END IF;
	IF params->>'flow_id' <> '' THEN
		sflow := ffd_parse_uuid('flow_id', params->>'flow_id');
		part := ffd_partition(sflow);
		SELECT ff.state INTO r FROM ff_flow ff WHERE ff.partition_key = part AND ff.flow_id = sflow;
		IF r.state IS NULL THEN
			PERFORM ffd_not_found('flow', sflow::text);
		ELSIF r.state <> 'open' THEN
			PERFORM ffd_already_terminal('flow', sflow::text, r.state);
		END IF;
	ELSE
		SELECT * INTO x FROM ffd_parse_id('execution_id', params->>'execution_id');
		EXECUTE {{q .S.GetExecution}} INTO r USING x.part, x.id;
		IF r.execution_id IS NULL THEN
			PERFORM ffd_not_found('execution', ffd_id(x.part, x.id));
		ELSIF r.state NOT IN ('blocked', 'pending', 'running') THEN
			PERFORM ffd_already_terminal('execution', ffd_id(x.part, x.id), r.state);
		END IF;
		part := x.part; sflow := r.flow_id; sexec := x.id;
	END IF;
	EXECUTE {{q .S.AnchorLock}} USING coalesce(sflow, sexec);
	EXECUTE {{q .S.SendSignal}} INTO sent, woke, lane USING part, sid, sflow, sexec, name, payload;
	IF woke IS NOT NULL THEN
		PERFORM ffd_notify(ARRAY[{{lit .ChannelReady}}, {{lit .ChannelLease}}], ARRAY[lane, part::text]);
	END IF;
	RETURN jsonb_build_object('signal_id', sid, 'sent_at', sent, 'woke', CASE WHEN woke IS NOT NULL THEN ffd_id(part, woke) END);
END
$fn$;

-- ffd_publish publishes an event for the triggers (Client.PublishEvent);
-- a key published before under the name is that event, existed true.
CREATE OR REPLACE FUNCTION ffd_publish(params jsonb) RETURNS jsonb LANGUAGE plpgsql AS $fn$
DECLARE
	ns text;
	name text;
	key text;
	payload bytea;
	part smallint;
	r record;
	cnt int;
BEGIN
	PERFORM ffd_fields(params, '', ARRAY['namespace', 'name', 'key', 'payload']);
	ns := coalesce(nullif(ffd_text(params, 'namespace', 'namespace'), ''), {{lit .L.DefaultNamespace}});
	PERFORM ffd_check_name('namespace', ns);
	name := ffd_text(params, 'name', 'event');
	PERFORM ffd_check_name('event', name);
	key := coalesce(nullif(ffd_text(params, 'key', 'key'), ''), gen_random_uuid()::text);
	PERFORM ffd_check_text('key', key, {{.L.MaxEventKey}});
	payload := ffd_json_bytes(params->'payload');
	IF octet_length(payload) > ffd_max_payload() THEN
		PERFORM ffd_invalid('too_large', 'payload', octet_length(payload) || ' bytes', format('at most %s bytes', ffd_max_payload()));
	END IF;
	part := ff_key_partition(ns, name || '/' || key);
	EXECUTE {{rows .S.PublishEvent}} INTO r USING part, ffd_uuid_in(part), ns, name, key, convert_from(payload, 'UTF8');
	GET DIAGNOSTICS cnt = ROW_COUNT;
	IF cnt = 0 THEN
		EXECUTE {{q .S.EventByKey}} INTO r USING part, ns, name, key;
	END IF;
	PERFORM ffd_notify(ARRAY[{{lit .ChannelEvent}}], ARRAY['']);
	RETURN jsonb_build_object('event_id', r.event_id, 'namespace', r.namespace, 'name', r.name, 'key', r.event_key,
		'published_at', r.published_at, 'existed', cnt = 0);
END
$fn$;

-- Reading -------------------------------------------------------------------

-- ffd_execution reads an execution (Client.Get).
CREATE OR REPLACE FUNCTION ffd_execution(execution_id text) RETURNS jsonb LANGUAGE plpgsql STABLE AS $fn$
DECLARE x record; r record;
BEGIN
	SELECT * INTO x FROM ffd_parse_id('execution_id', execution_id);
	EXECUTE {{q .S.GetExecution}} INTO r USING x.part, x.id;
	IF r.execution_id IS NULL THEN
		PERFORM ffd_not_found('execution', ffd_id(x.part, x.id));
	END IF;
	RETURN ffd_execution_json(r);
END
$fn$;

-- ffd_flow reads a flow's state and its members by step (Client.DescribeFlow).
CREATE OR REPLACE FUNCTION ffd_flow(flow_id text) RETURNS jsonb LANGUAGE plpgsql STABLE AS $fn$
DECLARE
	fid uuid := ffd_parse_uuid('flow_id', flow_id);
	part smallint := ffd_partition(fid);
	f record;
	members jsonb;
BEGIN
	SELECT ff.* INTO f FROM ff_flow ff WHERE ff.partition_key = part AND ff.flow_id = fid;
	IF f.flow_id IS NULL THEN
		PERFORM ffd_not_found('flow', fid::text);
	END IF;
	SELECT coalesce(jsonb_object_agg(coalesce(e.step, ffd_id(e.partition_key, e.execution_id)), ffd_execution_json(e)), '{}')
		INTO members FROM ff_execution e WHERE e.partition_key = part AND e.flow_id = fid;
	RETURN jsonb_build_object('id', f.flow_id, 'namespace', f.namespace, 'kind', f.kind, 'state', f.state,
		'created_at', f.created_at, 'terminal_at', f.terminal_at, 'cancel_reason', f.cancel_reason,
		'node_count', f.node_count, 'edge_count', f.edge_count, 'members', members);
END
$fn$;

-- Text forms ------------------------------------------------------------------

-- ffd_parse_json reads the JSON of a text argument, refusing malformed
-- JSON as a validation error. Each function that takes JSON has a text
-- form through it; an untyped literal or a driver's text parameter picks
-- the text form (Postgres prefers the string category for unknowns).
CREATE OR REPLACE FUNCTION ffd_parse_json(field text, s text) RETURNS jsonb LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
	RETURN s::jsonb;
EXCEPTION WHEN invalid_text_representation OR untranslatable_character THEN
	PERFORM ffd_invalid('invalid_value', field, coalesce(s, ''), 'not JSON: ' || SQLERRM);
	RETURN NULL;
END
$fn$;

CREATE OR REPLACE FUNCTION ffd_create(params text) RETURNS jsonb LANGUAGE sql AS $fn$
	SELECT ffd_create(ffd_parse_json('params', params))
$fn$;
CREATE OR REPLACE FUNCTION ffd_create_many(params text) RETURNS jsonb LANGUAGE sql AS $fn$
	SELECT ffd_create_many(ffd_parse_json('executions', params))
$fn$;
CREATE OR REPLACE FUNCTION ffd_submit_flow(params text) RETURNS jsonb LANGUAGE sql AS $fn$
	SELECT ffd_submit_flow(ffd_parse_json('params', params))
$fn$;
CREATE OR REPLACE FUNCTION ffd_signal(params text) RETURNS jsonb LANGUAGE sql AS $fn$
	SELECT ffd_signal(ffd_parse_json('params', params))
$fn$;
CREATE OR REPLACE FUNCTION ffd_publish(params text) RETURNS jsonb LANGUAGE sql AS $fn$
	SELECT ffd_publish(ffd_parse_json('params', params))
$fn$;

-- Privileges: every function runs as its owner with this schema's
-- search_path; none is executable by PUBLIC (deploy/roles.sql grants the
-- API's entry points to ffd_producer and ffd_runtime).
DO $do$
DECLARE f regprocedure;
BEGIN
	FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
		JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = {{lit .Schema}} AND p.proname LIKE 'ffd\_%'
	LOOP
		EXECUTE format('ALTER FUNCTION %s SECURITY DEFINER SET search_path = %I, pg_temp', f, {{lit .Schema}});
		EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', f);
	END LOOP;
END
$do$;
