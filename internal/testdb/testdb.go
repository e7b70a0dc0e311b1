// Package testdb gives every test its own migrated Postgres database.
//
// Once per test binary it starts a throwaway cluster (internal/pgserver) in
// a temporary directory, migrates a template database once, and clones the
// template for each test that asks, so tests run in parallel and a NOTIFY
// never crosses from one test to another. When FFD_TEST_DATABASE_URL is set
// it uses that server instead (it needs the right to create databases) and
// drops what it created when the binary ends.
//
// A package that uses it declares
//
//	func TestMain(m *testing.M) { testdb.Main(m) }
//
// so that the cluster is stopped and its directory removed when the tests
// end, whatever their outcome. If the test binary itself dies, the server
// follows it (parent-death signal) and the next run removes the directory.
package testdb

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flowfabric/ffd/internal/pgserver"
	"github.com/flowfabric/ffd/internal/schema"
)

// EnvURL names the variable that points the tests at an existing server.
const EnvURL = "FFD_TEST_DATABASE_URL"

// EnvSetupTimeout names the variable that bounds each step of preparing
// the tests' databases (a Go duration): starting the cluster, migrating
// its template, creating one test's database. Default SetupTimeout.
const EnvSetupTimeout = "FFD_TEST_SETUP_TIMEOUT"

// SetupTimeout is the default bound of each step of preparing the tests'
// databases. Generous: on a machine whose every core is busy, starting a
// server and migrating a template that take seconds alone took minutes.
// Each is a bound on a step that makes progress, not a measure of speed.
const SetupTimeout = 10 * time.Minute

// setupTimeout is EnvSetupTimeout's value, or SetupTimeout.
func setupTimeout() time.Duration {
	if d, err := time.ParseDuration(os.Getenv(EnvSetupTimeout)); err == nil && d > 0 {
		return d
	}
	return SetupTimeout
}

// overBudget names the budget in an error that a step ran out of.
func overBudget(ctx context.Context, step string, budget time.Duration, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%s took longer than %s (%s): %w", step, budget, EnvSetupTimeout, err)
	}
	return fmt.Errorf("%s: %w", step, err)
}

const dirPrefix = "ffd-testpg-"
const ownerFile = "ffd-owner-pid"

// DB is one test's database.
type DB struct {
	// Pool is connected to the database; closed when the test ends.
	Pool *pgxpool.Pool
	// URL connects to the database, for connections of the test's own (a
	// listener, a second daemon).
	URL string
	// Name is the database name.
	Name string
}

type cluster struct {
	server   *pgserver.Server // nil with EnvURL
	root     string           // temporary directory, "" with EnvURL
	adminURL string
	template string
	prefix   string
	created  []string
	mu       sync.Mutex
}

var (
	once    sync.Once
	shared  *cluster
	initErr error
	counter atomic.Int64
)

// Main runs the package's tests and then tears the cluster down.
func Main(m *testing.M) {
	os.Exit(mainWith(m.Run))
}

func mainWith(run func() int) int {
	code := run()
	if err := teardown(); err != nil {
		fmt.Fprintln(os.Stderr, "testdb:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// New returns a fresh database migrated to the latest schema.
func New(t testing.TB) *DB {
	t.Helper()
	return newDB(t, true)
}

// NewEmpty returns a fresh database with no ffd schema, for tests of the
// migrations themselves.
func NewEmpty(t testing.TB) *DB {
	t.Helper()
	return newDB(t, false)
}

func newDB(t testing.TB, migrated bool) *DB {
	t.Helper()
	db, err := open(migrated)
	if err != nil {
		t.Fatalf("test database: %v", err)
	}
	t.Cleanup(db.Pool.Close)
	return db
}

// Open returns a fresh migrated database for code that has no testing.TB,
// such as a TestMain preparing runnable examples. The caller closes Pool;
// the database goes with the cluster when Main ends.
func Open() (*DB, error) { return open(true) }

func open(migrated bool) (*DB, error) {
	c, err := get()
	if err != nil {
		return nil, err
	}
	budget := setupTimeout()
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	name := fmt.Sprintf("%s_%d", c.prefix, counter.Add(1))
	template := "template0"
	if migrated {
		template = c.template
	}
	if err := c.admin(ctx, fmt.Sprintf(`CREATE DATABASE %s TEMPLATE %s`, name, template)); err != nil {
		return nil, overBudget(ctx, "create test database "+name, budget, err)
	}
	c.mu.Lock()
	c.created = append(c.created, name)
	c.mu.Unlock()
	url := replaceDB(c.adminURL, name)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse test database URL: %w", err)
	}
	cfg.MaxConns = 12
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, overBudget(ctx, "connect test database "+name, budget, err)
	}
	return &DB{Pool: pool, URL: url, Name: name}, nil
}

func get() (*cluster, error) {
	once.Do(func() { shared, initErr = setup() })
	return shared, initErr
}

func setup() (*cluster, error) {
	// Each step its own budget, so that one slow step leaves the next
	// its whole bound.
	budget := setupTimeout()
	c := &cluster{prefix: fmt.Sprintf("ffd_test_%d_%d", os.Getpid(), time.Now().UnixNano()%1_000_000)}
	if url := os.Getenv(EnvURL); url != "" {
		c.adminURL = url
		c.template = c.prefix + "_tmpl"
	} else {
		removeStale()
		root, err := os.MkdirTemp("", dirPrefix)
		if err != nil {
			return nil, fmt.Errorf("create cluster directory: %w", err)
		}
		c.root = root
		// The server user must be able to reach its data directory below.
		if err := os.Chmod(root, 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(root, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			return nil, err
		}
		sock := filepath.Join(root, "sock")
		if err := os.Mkdir(sock, 0o755); err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), budget)
		srv, err := pgserver.Start(ctx, pgserver.Config{DataDir: filepath.Join(root, "data"), SocketDir: sock, StartTimeout: budget})
		err = startErr(ctx, budget, err)
		cancel()
		if err != nil {
			os.RemoveAll(root)
			return nil, err
		}
		c.server = srv
		c.adminURL = srv.URL("postgres")
		c.template = "ffd_template"
	}
	if err := c.migrateTemplate(budget); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

// startErr names the budget in an error of starting the test cluster.
func startErr(ctx context.Context, budget time.Duration, err error) error {
	if err == nil {
		return nil
	}
	return overBudget(ctx, "start the tests' private PostgreSQL", budget, err)
}

// migrateTemplate creates the template database and migrates it, within
// budget.
func (c *cluster) migrateTemplate(budget time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	if err := c.admin(ctx, `CREATE DATABASE `+c.template); err != nil {
		return overBudget(ctx, "create the template database", budget, err)
	}
	c.created = append(c.created, c.template)
	pool, err := pgxpool.New(ctx, replaceDB(c.adminURL, c.template))
	if err != nil {
		return overBudget(ctx, "connect to the template database", budget, err)
	}
	_, err = schema.Up(ctx, pool, 0)
	pool.Close()
	if err != nil {
		return overBudget(ctx, "migrate the template database", budget, err)
	}
	return nil
}

func (c *cluster) admin(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, c.adminURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

func teardown() error {
	if shared == nil {
		return nil
	}
	return shared.stop()
}

func (c *cluster) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs []error
	if c.server == nil {
		// An external server: drop what we made, newest first (the
		// template last).
		for i := len(c.created) - 1; i >= 0; i-- {
			if err := c.admin(ctx, `DROP DATABASE IF EXISTS `+c.created[i]+` WITH (FORCE)`); err != nil {
				errs = append(errs, fmt.Errorf("drop %s: %w", c.created[i], err))
			}
		}
		return errors.Join(errs...)
	}
	if err := c.server.Stop(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := os.RemoveAll(c.root); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// removeStale deletes the directories of earlier test binaries that died
// without cleaning up. On Linux their server died with them; elsewhere it
// is stopped here first.
func removeStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || pgserver.Alive(pid) {
			continue
		}
		if p, _, ok := pgserver.PIDFile(filepath.Join(dir, "data")); ok && pgserver.Alive(p) {
			if pgserver.DiesWithParent {
				continue // it is dying with its owner; the next run removes it
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := pgserver.StopOrphan(ctx, filepath.Join(dir, "data"))
			cancel()
			if err != nil {
				continue
			}
		}
		os.RemoveAll(dir)
	}
}

func replaceDB(dsn, name string) string {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return dsn
	}
	// Rebuild from the parsed parts so that URL and keyword/value DSNs both
	// work.
	u := url.URL{Scheme: "postgres", Path: "/" + name}
	if cfg.Password != "" {
		u.User = url.UserPassword(cfg.User, cfg.Password)
	} else {
		u.User = url.User(cfg.User)
	}
	q := url.Values{}
	if strings.HasPrefix(cfg.Host, "/") {
		q.Set("host", cfg.Host)
		q.Set("port", strconv.Itoa(int(cfg.Port)))
	} else {
		u.Host = net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	}
	if cfg.TLSConfig == nil {
		q.Set("sslmode", "disable")
	}
	u.RawQuery = q.Encode()
	return u.String()
}
