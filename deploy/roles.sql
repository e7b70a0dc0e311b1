-- Least-privilege roles for ffd. Run it for each database that holds ffd,
-- connected to that database, as a superuser or as a role that may create
-- roles and owns the database; running it again is harmless:
--
--     psql "$ADMIN_URL" -v ON_ERROR_STOP=1 -f deploy/roles.sql
--
-- ffd's tables live in public unless its URLs say ?search_path=NAME; for
-- another schema, create it and name it to this script with the setting
-- ffd.schema:
--
--     psql "$ADMIN_URL" -c 'CREATE SCHEMA ffd_app'
--     PGOPTIONS='-c ffd.schema=ffd_app' psql "$ADMIN_URL" -v ON_ERROR_STOP=1 -f deploy/roles.sql
--
-- then give each login role a password (\password ffd_daemon) or a
-- certificate, and point each component at its own role:
--
--   ffd_migrator  `ffd migrate up`: creates and alters the ff_ tables, and
--                 the ff_outbox publication, which needs CREATE on the
--                 database. Run the migrations as this role.
--   ffd_daemon    `ffd run`: DML on the ff_ tables, the event sequence.
--   ffd_worker    your worker and client processes: the same DML.
--   ffd_wal       `ffd events tail --wal` and ffd.StreamWAL: REPLICATION,
--                 which logical decoding needs and nothing else grants.
--   ffd_producer  applications in any language that create and read work
--                 through the SQL API (docs/sql.md): EXECUTE on its
--                 functions, which run as their owner, and no privilege
--                 on any table.
--
-- Cursor consumers (`ffd events tail --consumer`, Client.Consume) run as
-- ffd_worker or any role granted ffd_runtime.
--
-- The grants to ffd_runtime cover the tables as they exist; the default
-- privileges below extend them to tables later migrations create, as long
-- as ffd_migrator runs those migrations.

-- Roles belong to the cluster, not to one database: the first run creates
-- them, a run for another database (or a second run) finds them.
DO $$
DECLARE r record;
BEGIN
    FOR r IN SELECT * FROM (VALUES
        ('ffd_migrator', 'LOGIN'), ('ffd_runtime', 'NOLOGIN'), ('ffd_daemon', 'LOGIN'),
        ('ffd_worker', 'LOGIN'), ('ffd_wal', 'LOGIN REPLICATION'), ('ffd_producer', 'LOGIN')) AS v(name, options)
    LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r.name) THEN
            EXECUTE format('CREATE ROLE %I %s', r.name, r.options);
        END IF;
    END LOOP;
END
$$;
GRANT ffd_runtime TO ffd_daemon, ffd_worker;

-- The schema: ffd.schema when set, else public.
SELECT set_config('ffd.schema', coalesce(nullif(current_setting('ffd.schema', true), ''), 'public'), false);

DO $$
DECLARE s text := current_setting('ffd.schema');
BEGIN
    EXECUTE format('GRANT CONNECT, CREATE ON DATABASE %I TO ffd_migrator', current_database());
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO ffd_runtime, ffd_wal, ffd_producer', current_database());
    EXECUTE format('GRANT USAGE, CREATE ON SCHEMA %I TO ffd_migrator', s);
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO ffd_runtime, ffd_wal, ffd_producer', s);
END
$$;

-- Tables that already exist (migrated before this script ran): the
-- migrator takes them over so that it can alter them, and the runtime
-- role gets DML on them (SELECT only on the migration ledger).
-- Tables first, then sequences, each by name: a sequence a column owns
-- (serial, identity) changes owner with its table and refuses to be
-- given one of its own, so only free-standing sequences are given one.
DO $$
DECLARE
    s text := current_setting('ffd.schema');
    t record;
BEGIN
    FOR t IN SELECT c.relname, c.relkind,
            EXISTS (SELECT 1 FROM pg_depend d
                WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
                    AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')) AS owned
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = s AND c.relname LIKE 'ff\_%' AND c.relkind IN ('r', 'S')
        ORDER BY c.relkind = 'S', c.relname
    LOOP
        IF t.relkind = 'S' THEN
            IF NOT t.owned THEN
                EXECUTE format('ALTER SEQUENCE %I.%I OWNER TO ffd_migrator', s, t.relname);
            END IF;
            EXECUTE format('GRANT USAGE, SELECT ON SEQUENCE %I.%I TO ffd_runtime', s, t.relname);
        ELSE
            EXECUTE format('ALTER TABLE %I.%I OWNER TO ffd_migrator', s, t.relname);
            IF t.relname = 'ff_schema_version' THEN
                EXECUTE format('GRANT SELECT ON %I.%I TO ffd_runtime', s, t.relname);
            ELSE
                EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %I.%I TO ffd_runtime', s, t.relname);
            END IF;
        END IF;
    END LOOP;
    IF EXISTS (SELECT 1 FROM pg_publication WHERE pubname = 'ff_outbox') THEN
        ALTER PUBLICATION ff_outbox OWNER TO ffd_migrator;
    END IF;
    -- It runs as its owner, so that the daemon may refresh the tables'
    -- planner statistics (ANALYZE needs the owner): the tables' owner.
    IF to_regprocedure(format('%I.ff_refresh_statistics(bigint, double precision)', s)) IS NOT NULL THEN
        EXECUTE format('ALTER FUNCTION %I.ff_refresh_statistics(bigint, double precision) OWNER TO ffd_migrator', s);
    END IF;
    -- The SQL API's functions (docs/sql.md) run as their owner: the
    -- tables' owner, so that a role that may only execute them needs no
    -- table privilege. `ffd migrate up` (re)creates them; these are the
    -- ones a migration before this script made.
    FOR t IN SELECT p.oid::regprocedure AS f FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = s AND p.proname LIKE 'ffd\_%'
    LOOP
        EXECUTE format('ALTER FUNCTION %s OWNER TO ffd_migrator', t.f);
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO ffd_runtime, ffd_producer', t.f);
    END LOOP;
    EXECUTE format('ALTER DEFAULT PRIVILEGES FOR ROLE ffd_migrator IN SCHEMA %I
        GRANT EXECUTE ON FUNCTIONS TO ffd_runtime, ffd_producer', s);
    -- Tables and sequences later migrations create, run as ffd_migrator.
    EXECUTE format('ALTER DEFAULT PRIVILEGES FOR ROLE ffd_migrator IN SCHEMA %I
        GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO ffd_runtime', s);
    EXECUTE format('ALTER DEFAULT PRIVILEGES FOR ROLE ffd_migrator IN SCHEMA %I
        GRANT USAGE, SELECT ON SEQUENCES TO ffd_runtime', s);
END
$$;
