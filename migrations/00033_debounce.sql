-- +goose Up
-- Debounce windows (docs/intake.md, "Debounce"): one row per debounced
-- key, naming the execution its creates fold into. The row lives on the
-- key's partition, beside that execution, and a debounced create locks
-- it first, so the creates of one key take turns and each window gets
-- one execution, however many creators race.
CREATE TABLE IF NOT EXISTS ff_debounce (
    partition_key smallint    NOT NULL,
    namespace     text        NOT NULL,
    debounce_key  text        NOT NULL,
    execution_id  uuid        NOT NULL,  -- the window's execution
    first_at      timestamptz NOT NULL,  -- the window's first create
    until         timestamptz,           -- a leading window's end; null for trailing
    folds         bigint      NOT NULL CHECK (folds >= 1),  -- creates the execution stands for
    PRIMARY KEY (partition_key, namespace, debounce_key)
);

-- +goose Down
DROP TABLE IF EXISTS ff_debounce;
