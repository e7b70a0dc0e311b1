-- +goose Up
-- ffd core schema. Table and column names are a contract with consumers and
-- operators (docs/schema.md); add columns freely, never rename these.
-- Every flow- or execution-scoped table leads its primary key with
-- partition_key (the co-location key; see docs/design.md, section 2). No native
-- partitioning: stock Postgres must run ffd without lock-table tuning.

CREATE TABLE ff_flow (
    partition_key       smallint    NOT NULL CHECK (partition_key BETWEEN 0 AND 255),
    flow_id             uuid        NOT NULL,
    namespace           text        NOT NULL DEFAULT 'default',
    kind                text        NOT NULL DEFAULT '',
    state               text        NOT NULL DEFAULT 'open'
                        CHECK (state IN ('open', 'completed', 'failed', 'cancelled')),
    graph_revision      bigint      NOT NULL DEFAULT 0 CHECK (graph_revision >= 0),
    node_count          integer     NOT NULL DEFAULT 0 CHECK (node_count >= 0),
    edge_count          integer     NOT NULL DEFAULT 0 CHECK (edge_count >= 0),
    cancellation_policy text        CHECK (cancellation_policy IN ('flow_only', 'cancel_all', 'cancel_pending')),
    cancel_reason       text,
    cancelled_members   uuid[]      NOT NULL DEFAULT '{}',
    tags                jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(tags) = 'object'),
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    terminal_at         timestamptz,
    PRIMARY KEY (partition_key, flow_id),
    CONSTRAINT ff_flow_terminal_at CHECK ((state = 'open') = (terminal_at IS NULL)),
    CONSTRAINT ff_flow_cancel_policy CHECK ((state = 'cancelled') = (cancellation_policy IS NOT NULL))
);
CREATE INDEX ff_flow_list ON ff_flow (namespace, flow_id);

CREATE TABLE ff_execution (
    partition_key         smallint         NOT NULL CHECK (partition_key BETWEEN 0 AND 255),
    execution_id          uuid             NOT NULL,
    flow_id               uuid,
    namespace             text             NOT NULL DEFAULT 'default',
    lane                  text             NOT NULL CHECK (lane ~ '^[A-Za-z0-9_.:-]{1,128}$'),
    kind                  text             NOT NULL DEFAULT '',
    priority              integer          NOT NULL DEFAULT 0,
    required_capabilities text[]           NOT NULL DEFAULT '{}',
    state                 text             NOT NULL
                          CHECK (state IN ('blocked', 'pending', 'running',
                                           'completed', 'failed', 'cancelled', 'skipped', 'expired')),
    run_at                timestamptz      NOT NULL DEFAULT now(),
    attempt               integer          NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    max_attempts          integer          NOT NULL DEFAULT 5 CHECK (max_attempts BETWEEN 1 AND 1000),
    backoff_base          interval         NOT NULL DEFAULT '1 second' CHECK (backoff_base > '0'),
    backoff_max           interval         NOT NULL DEFAULT '5 minutes',
    backoff_multiplier    double precision NOT NULL DEFAULT 2 CHECK (backoff_multiplier BETWEEN 1 AND 100),
    backoff_jitter        double precision NOT NULL DEFAULT 0.1 CHECK (backoff_jitter BETWEEN 0 AND 1),
    lease_epoch           bigint           NOT NULL DEFAULT 0 CHECK (lease_epoch >= 0),
    lease_owner           text,
    lease_expires_at      timestamptz,
    lease_ttl             interval         NOT NULL DEFAULT '30 seconds'
                          CHECK (lease_ttl >= '1 second' AND lease_ttl <= '1 day'),
    attempt_timeout       interval         CHECK (attempt_timeout > '0' AND attempt_timeout <= '7 days'),
    attempt_deadline_at   timestamptz,
    deadline_at           timestamptz,
    payload               bytea            NOT NULL DEFAULT '',
    result                bytea,
    last_error            text,
    idempotency_key       text             CHECK (length(idempotency_key) BETWEEN 1 AND 512),
    created_at            timestamptz      NOT NULL DEFAULT now(),
    started_at            timestamptz,
    terminal_at           timestamptz,
    cancellation_reason   text,
    cancelled_by          text,
    tags                  jsonb            NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(tags) = 'object'),
    PRIMARY KEY (partition_key, execution_id),
    -- A flow member lives on its flow's partition: the foreign key includes it.
    FOREIGN KEY (partition_key, flow_id) REFERENCES ff_flow (partition_key, flow_id),
    CONSTRAINT ff_execution_backoff CHECK (backoff_max >= backoff_base),
    -- A lease exists exactly while running; a run has begun exactly when an
    -- attempt has been made.
    CONSTRAINT ff_execution_lease CHECK (
        (state = 'running') = (lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL)),
    CONSTRAINT ff_execution_lease_epoch CHECK (state <> 'running' OR (attempt >= 1 AND lease_epoch >= 1)),
    CONSTRAINT ff_execution_started CHECK ((attempt = 0) = (started_at IS NULL)),
    CONSTRAINT ff_execution_attempt_deadline CHECK (state = 'running' OR attempt_deadline_at IS NULL),
    CONSTRAINT ff_execution_terminal_at CHECK (
        (state IN ('completed', 'failed', 'cancelled', 'skipped', 'expired')) = (terminal_at IS NOT NULL)),
    CONSTRAINT ff_execution_result CHECK (state = 'completed' OR result IS NULL),
    CONSTRAINT ff_execution_cancelled CHECK (
        (state = 'cancelled') = (cancellation_reason IS NOT NULL AND cancelled_by IS NOT NULL)),
    CONSTRAINT ff_execution_blocked_in_flow CHECK (state <> 'blocked' OR flow_id IS NOT NULL)
);
-- Claim: due pending executions of a lane, highest priority then oldest run_at.
CREATE INDEX ff_execution_claim ON ff_execution (lane, priority DESC, run_at, execution_id)
    WHERE state = 'pending';
-- Lease expiry and attempt timeouts of running executions.
CREATE INDEX ff_execution_lease_expiry ON ff_execution (lease_expires_at) WHERE state = 'running';
CREATE INDEX ff_execution_attempt_deadline ON ff_execution (attempt_deadline_at)
    WHERE state = 'running' AND attempt_deadline_at IS NOT NULL;
-- Deadlines of executions that can still run.
CREATE INDEX ff_execution_deadline ON ff_execution (deadline_at)
    WHERE deadline_at IS NOT NULL AND state IN ('blocked', 'pending', 'running');
-- Delayed pending executions, for the daemon's ff_ready when they come due.
CREATE INDEX ff_execution_delayed ON ff_execution (run_at) WHERE state = 'pending';
CREATE INDEX ff_execution_flow ON ff_execution (partition_key, flow_id) WHERE flow_id IS NOT NULL;
CREATE INDEX ff_execution_list ON ff_execution (execution_id);
CREATE UNIQUE INDEX ff_execution_idempotency ON ff_execution (namespace, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

CREATE TABLE ff_attempt (
    partition_key smallint    NOT NULL,
    execution_id  uuid        NOT NULL,
    attempt       integer     NOT NULL CHECK (attempt >= 1),
    lease_epoch   bigint      NOT NULL CHECK (lease_epoch >= 1),
    worker        text        NOT NULL,
    started_at    timestamptz NOT NULL DEFAULT now(),
    ended_at      timestamptz,
    outcome       text        CHECK (outcome IN ('succeeded', 'failed', 'timed_out', 'cancelled', 'revoked')),
    error         text,
    PRIMARY KEY (partition_key, execution_id, attempt),
    FOREIGN KEY (partition_key, execution_id) REFERENCES ff_execution (partition_key, execution_id),
    CONSTRAINT ff_attempt_ended CHECK ((outcome IS NULL) = (ended_at IS NULL))
);

CREATE TABLE ff_edge (
    partition_key    smallint    NOT NULL,
    flow_id          uuid        NOT NULL,
    edge_id          uuid        NOT NULL,
    upstream_id      uuid        NOT NULL,
    downstream_id    uuid        NOT NULL,
    dependency_kind  text        NOT NULL DEFAULT 'success_only',
    data_passing_ref text,
    state            text        NOT NULL DEFAULT 'staged' CHECK (state IN ('staged', 'applied', 'resolved')),
    resolved_outcome text        CHECK (resolved_outcome IN ('success', 'failed', 'cancelled', 'expired', 'skipped')),
    created_at       timestamptz NOT NULL DEFAULT now(),
    applied_at       timestamptz,
    resolved_at      timestamptz,
    PRIMARY KEY (partition_key, flow_id, edge_id),
    FOREIGN KEY (partition_key, flow_id) REFERENCES ff_flow (partition_key, flow_id),
    FOREIGN KEY (partition_key, upstream_id) REFERENCES ff_execution (partition_key, execution_id),
    FOREIGN KEY (partition_key, downstream_id) REFERENCES ff_execution (partition_key, execution_id),
    CONSTRAINT ff_edge_pair UNIQUE (partition_key, flow_id, upstream_id, downstream_id),
    CONSTRAINT ff_edge_no_self CHECK (upstream_id <> downstream_id),
    CONSTRAINT ff_edge_applied CHECK ((state = 'staged') = (applied_at IS NULL)),
    CONSTRAINT ff_edge_resolved CHECK (
        (state = 'resolved') = (resolved_outcome IS NOT NULL AND resolved_at IS NOT NULL))
);
-- Outgoing edges are served by ff_edge_pair; incoming ones by this index.
CREATE INDEX ff_edge_downstream ON ff_edge (partition_key, flow_id, downstream_id);
-- The cascade looks up outgoing edges by upstream alone (it knows the
-- execution, not always the flow).
CREATE INDEX ff_edge_upstream ON ff_edge (partition_key, upstream_id);

CREATE TABLE ff_edge_group (
    partition_key  smallint    NOT NULL,
    flow_id        uuid        NOT NULL,
    downstream_id  uuid        NOT NULL,
    policy         text        NOT NULL DEFAULT 'all_of' CHECK (policy IN ('all_of', 'any_of', 'quorum')),
    k              integer     CHECK (k >= 1),
    on_satisfied   text        CHECK (on_satisfied IN ('cancel_remaining', 'let_run')),
    total          integer     NOT NULL DEFAULT 0 CHECK (total >= 0),
    success_count  integer     NOT NULL DEFAULT 0 CHECK (success_count >= 0),
    fail_count     integer     NOT NULL DEFAULT 0 CHECK (fail_count >= 0),
    skip_count     integer     NOT NULL DEFAULT 0 CHECK (skip_count >= 0),
    decision       text        NOT NULL DEFAULT 'pending' CHECK (decision IN ('pending', 'satisfied', 'impossible')),
    decided_at     timestamptz,
    cancel_members uuid[]      NOT NULL DEFAULT '{}',
    PRIMARY KEY (partition_key, flow_id, downstream_id),
    FOREIGN KEY (partition_key, flow_id) REFERENCES ff_flow (partition_key, flow_id),
    FOREIGN KEY (partition_key, downstream_id) REFERENCES ff_execution (partition_key, execution_id),
    CONSTRAINT ff_edge_group_k CHECK ((policy = 'quorum') = (k IS NOT NULL)),
    CONSTRAINT ff_edge_group_on_satisfied CHECK ((policy = 'all_of') = (on_satisfied IS NULL)),
    CONSTRAINT ff_edge_group_counts CHECK (success_count + fail_count + skip_count <= total),
    CONSTRAINT ff_edge_group_decided CHECK ((decision = 'pending') = (decided_at IS NULL))
);

CREATE TABLE ff_pending_cancel_group (
    partition_key smallint    NOT NULL,
    flow_id       uuid        NOT NULL,
    downstream_id uuid        NOT NULL,
    enqueued_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (partition_key, flow_id, downstream_id),
    FOREIGN KEY (partition_key, flow_id, downstream_id)
        REFERENCES ff_edge_group (partition_key, flow_id, downstream_id)
);
CREATE INDEX ff_pending_cancel_group_age ON ff_pending_cancel_group (enqueued_at);

CREATE TABLE ff_completion_event (
    event_id      bigint      GENERATED ALWAYS AS IDENTITY,
    txid          xid8        NOT NULL DEFAULT pg_current_xact_id(),
    partition_key smallint    NOT NULL CHECK (partition_key BETWEEN 0 AND 255),
    execution_id  uuid,
    flow_id       uuid,
    outcome       text        NOT NULL,
    attempt       integer     NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    namespace     text        NOT NULL DEFAULT 'default',
    occurred_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    dispatched_at timestamptz,
    PRIMARY KEY (partition_key, event_id),
    CONSTRAINT ff_completion_event_outcome CHECK (
        (execution_id IS NOT NULL AND outcome IN ('success', 'failed', 'cancelled', 'expired', 'skipped'))
        OR (execution_id IS NULL AND flow_id IS NOT NULL AND outcome IN ('completed', 'failed', 'cancelled')))
);
-- A terminal state is final, so each execution and each flow has at most one
-- completion event: the database itself enforces invariant 1's "exactly".
CREATE UNIQUE INDEX ff_completion_event_execution ON ff_completion_event (partition_key, execution_id)
    WHERE execution_id IS NOT NULL;
CREATE UNIQUE INDEX ff_completion_event_flow ON ff_completion_event (partition_key, flow_id)
    WHERE execution_id IS NULL;
CREATE UNIQUE INDEX ff_completion_event_id ON ff_completion_event (event_id);
CREATE INDEX ff_completion_event_undispatched ON ff_completion_event (event_id) WHERE dispatched_at IS NULL;
CREATE INDEX ff_completion_event_cursor ON ff_completion_event (txid, event_id);

CREATE TABLE ff_lease_event (
    event_id         bigint      GENERATED ALWAYS AS IDENTITY,
    txid             xid8        NOT NULL DEFAULT pg_current_xact_id(),
    partition_key    smallint    NOT NULL CHECK (partition_key BETWEEN 0 AND 255),
    execution_id     uuid        NOT NULL,
    lease_epoch      bigint      NOT NULL CHECK (lease_epoch >= 1),
    attempt          integer     NOT NULL CHECK (attempt >= 1),
    worker           text        NOT NULL,
    event_type       text        NOT NULL CHECK (event_type IN ('acquired', 'renewed', 'released', 'expired', 'revoked')),
    lease_expires_at timestamptz,
    occurred_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (partition_key, event_id)
);
CREATE UNIQUE INDEX ff_lease_event_id ON ff_lease_event (event_id);
CREATE INDEX ff_lease_event_cursor ON ff_lease_event (txid, event_id);
CREATE INDEX ff_lease_event_occurred ON ff_lease_event (occurred_at);

CREATE TABLE ff_outbox_consumer (
    name            text        PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9_.:-]{1,128}$'),
    stream          text        NOT NULL CHECK (stream IN ('completion', 'lease', 'all')),
    cursor_txid     xid8        NOT NULL DEFAULT '0',
    cursor_event_id bigint      NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);

-- Wake-ups. Payloads are hints only; correctness never depends on them.
-- Sent from triggers so that no write path can forget one; NOTIFY is
-- delivered at commit, and a rolled-back transaction sends nothing.

-- +goose StatementBegin
CREATE FUNCTION ff_notify_completion() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('ff_completion', NEW.event_id::text);
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER ff_completion_event_notify AFTER INSERT ON ff_completion_event
    FOR EACH ROW EXECUTE FUNCTION ff_notify_completion();

-- +goose StatementBegin
CREATE FUNCTION ff_notify_lease() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('ff_lease', NEW.event_id::text);
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER ff_lease_event_notify AFTER INSERT ON ff_lease_event
    FOR EACH ROW EXECUTE FUNCTION ff_notify_lease();

-- An execution becoming claimable now wakes the workers of its lane.
-- Postgres folds identical notifications of one transaction into one, so a
-- batch in one lane sends one. Delayed executions are announced by the
-- daemon when their run_at comes.
-- +goose StatementBegin
CREATE FUNCTION ff_notify_ready() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('ff_ready', NEW.lane);
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER ff_execution_ready_insert AFTER INSERT ON ff_execution
    FOR EACH ROW WHEN (NEW.state = 'pending' AND NEW.run_at <= now())
    EXECUTE FUNCTION ff_notify_ready();
CREATE TRIGGER ff_execution_ready_update AFTER UPDATE OF state ON ff_execution
    FOR EACH ROW WHEN (NEW.state = 'pending' AND OLD.state <> 'pending' AND NEW.run_at <= now())
    EXECUTE FUNCTION ff_notify_ready();

-- +goose Down
DROP TABLE ff_outbox_consumer, ff_lease_event, ff_completion_event, ff_pending_cancel_group,
    ff_edge_group, ff_edge, ff_attempt, ff_execution, ff_flow;
DROP FUNCTION ff_notify_completion(), ff_notify_lease(), ff_notify_ready();
