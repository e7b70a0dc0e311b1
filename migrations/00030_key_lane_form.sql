-- +goose NO TRANSACTION
-- +goose Up
-- ff_key's lane check (migration 00026) came back in the form migration
-- 00019 replaced everywhere else: `lane ~ '^[A-Za-z0-9_.:-]{1,128}$'`,
-- whose bounded repetition Postgres's regular expressions expand into 128
-- copies of the class, evaluated on every insert and every update of the
-- row. A keyed claim updates one ff_key row per key it serves (the key's
-- turn), so the check ran once per keyed execution started. The same rule
-- as a length test and an unbounded class, added NOT VALID, validated,
-- and only then the old check dropped, so no row is ever unchecked.
-- +goose StatementBegin
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = 'ff_key'::regclass AND conname = 'ff_key_lane_form') THEN
        ALTER TABLE ff_key ADD CONSTRAINT ff_key_lane_form
            CHECK (length(lane) BETWEEN 1 AND 128 AND lane ~ '^[A-Za-z0-9_.:-]+$') NOT VALID;
    END IF;
END $$;
-- +goose StatementEnd
ALTER TABLE ff_key VALIDATE CONSTRAINT ff_key_lane_form;
ALTER TABLE ff_key DROP CONSTRAINT IF EXISTS ff_key_lane_check;

-- +goose Down
ALTER TABLE ff_key ADD CONSTRAINT ff_key_lane_check CHECK (lane ~ '^[A-Za-z0-9_.:-]{1,128}$') NOT VALID;
ALTER TABLE ff_key VALIDATE CONSTRAINT ff_key_lane_check;
ALTER TABLE ff_key DROP CONSTRAINT IF EXISTS ff_key_lane_form;
