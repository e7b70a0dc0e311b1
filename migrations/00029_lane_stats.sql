-- +goose Up
-- Lane statistics: each lane's live executions by state and the age of
-- its oldest due one, as one daemon sampled them (docs/operations.md,
-- "Lane statistics"). The console and every daemon's metrics read these
-- rows, one per lane, instead of counting ff_execution each time: the
-- count is made once per sample interval by whichever daemon takes the
-- sample, however many consoles, scrapers and daemons read it.
CREATE TABLE IF NOT EXISTS ff_lane_stats (
    lane          text PRIMARY KEY,
    pending       bigint NOT NULL CHECK (pending >= 0),  -- due now
    delayed       bigint NOT NULL CHECK (delayed >= 0),  -- pending, due later
    running       bigint NOT NULL CHECK (running >= 0),
    blocked       bigint NOT NULL CHECK (blocked >= 0),
    oldest_due_at timestamptz,                           -- the oldest due pending execution's run_at
    sampled_at    timestamptz NOT NULL
);

-- The sample's own row: when the last sample was taken and by whom. A
-- daemon samples only when it is older than its interval, under a
-- transaction-scoped advisory lock (store.LaneSampleLock) that keeps a
-- second daemon sampling at the same moment out.
CREATE TABLE IF NOT EXISTS ff_lane_stats_sample (
    id         boolean PRIMARY KEY DEFAULT true CHECK (id),
    sampled_at timestamptz,
    sampled_by text
);
INSERT INTO ff_lane_stats_sample (id) VALUES (true) ON CONFLICT DO NOTHING;

-- +goose Down
DROP TABLE IF EXISTS ff_lane_stats_sample;
DROP TABLE IF EXISTS ff_lane_stats;
