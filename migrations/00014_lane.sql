-- +goose Up
-- Lane control: a paused lane is not claimed from; a lane with
-- max_running has at most that many executions running across every
-- worker. A lane without a row is neither, which is every lane until an
-- operator says otherwise: the claim reads this table by primary key and
-- finds nothing.
CREATE TABLE ff_lane (
    lane        text        PRIMARY KEY CHECK (lane ~ '^[A-Za-z0-9_.:-]{1,128}$'),
    paused      boolean     NOT NULL DEFAULT false,
    max_running integer     CHECK (max_running >= 1),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE IF EXISTS ff_lane;
