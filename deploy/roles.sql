-- Least-privilege roles for ffd. Run once per database, connected to it,
-- as a superuser or the database's owner:
--
--     psql "$ADMIN_URL" -v ON_ERROR_STOP=1 -f deploy/roles.sql
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
--
-- Cursor consumers (`ffd events tail --consumer`, Client.Consume) run as
-- ffd_worker or any role granted ffd_runtime.
--
-- The grants to ffd_runtime cover the tables as they exist; the default
-- privileges below extend them to tables later migrations create, as long
-- as ffd_migrator runs those migrations.

CREATE ROLE ffd_migrator LOGIN;
CREATE ROLE ffd_runtime NOLOGIN;
CREATE ROLE ffd_daemon LOGIN IN ROLE ffd_runtime;
CREATE ROLE ffd_worker LOGIN IN ROLE ffd_runtime;
CREATE ROLE ffd_wal LOGIN REPLICATION;

DO $$
BEGIN
    EXECUTE format('GRANT CONNECT, CREATE ON DATABASE %I TO ffd_migrator', current_database());
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO ffd_runtime, ffd_wal', current_database());
END
$$;
GRANT USAGE, CREATE ON SCHEMA public TO ffd_migrator;
GRANT USAGE ON SCHEMA public TO ffd_runtime, ffd_wal;

-- Tables that already exist (migrated before this script ran): the
-- migrator takes them over so that it can alter them, and the runtime
-- role gets DML on them (SELECT only on the migration ledger).
DO $$
DECLARE t record;
BEGIN
    FOR t IN SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'public' AND c.relname LIKE 'ff\_%' AND c.relkind IN ('r', 'S')
    LOOP
        IF t.relkind = 'S' THEN
            EXECUTE format('ALTER SEQUENCE public.%I OWNER TO ffd_migrator', t.relname);
            EXECUTE format('GRANT USAGE, SELECT ON SEQUENCE public.%I TO ffd_runtime', t.relname);
        ELSE
            EXECUTE format('ALTER TABLE public.%I OWNER TO ffd_migrator', t.relname);
            IF t.relname = 'ff_schema_version' THEN
                EXECUTE format('GRANT SELECT ON public.%I TO ffd_runtime', t.relname);
            ELSE
                EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON public.%I TO ffd_runtime', t.relname);
            END IF;
        END IF;
    END LOOP;
    IF EXISTS (SELECT 1 FROM pg_publication WHERE pubname = 'ff_outbox') THEN
        ALTER PUBLICATION ff_outbox OWNER TO ffd_migrator;
    END IF;
END
$$;

-- Tables and sequences later migrations create, run as ffd_migrator.
ALTER DEFAULT PRIVILEGES FOR ROLE ffd_migrator IN SCHEMA public
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO ffd_runtime;
ALTER DEFAULT PRIVILEGES FOR ROLE ffd_migrator IN SCHEMA public
    GRANT USAGE, SELECT ON SEQUENCES TO ffd_runtime;
