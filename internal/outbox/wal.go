package outbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/sourcegraph/conc/pool"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/session"
	"github.com/flowfabric/ffd/internal/store"
)

// Publication is the publication (created by the migrations) the WAL
// stream reads.
const Publication = "ff_outbox"

// DefaultStatusInterval is how often the stream reports its position to
// the server when idle.
const DefaultStatusInterval = 10 * time.Second

// ErrWALLevel is matched when the server cannot do logical decoding.
var ErrWALLevel = errors.New("wal_level is not logical")

func validSlot(s string) error {
	if len(s) == 0 || len(s) > 63 || strings.Trim(s, "abcdefghijklmnopqrstuvwxyz0123456789_") != "" {
		return fault.Invalid(ffdtype.KindInvalidValue, "slot", s, "want 1 to 63 of a-z 0-9 _ (a replication slot name)")
	}
	return nil
}

// connConfig parses a connection string and applies the session guard.
func connConfig(connString string, guard *ffdtype.SessionConfig) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("parse connection string: %w", err)
	}
	g := session.Default()
	if guard != nil {
		g = *guard
	}
	session.Apply(g, cfg)
	return cfg, nil
}

func replicationConn(ctx context.Context, cfg *pgconn.Config) (*pgconn.PgConn, error) {
	cfg = cfg.Copy()
	cfg.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("replication connection to %s:%d: %w", cfg.Host, cfg.Port, err)
	}
	return conn, nil
}

// CheckWALLevel fails with ErrWALLevel, naming the setting, unless the
// server runs with wal_level=logical.
func CheckWALLevel(ctx context.Context, conn *pgconn.PgConn) error {
	res, err := conn.Exec(ctx, "SHOW wal_level").ReadAll()
	if err != nil {
		return fmt.Errorf("read wal_level: %w", err)
	}
	if len(res) == 0 || len(res[0].Rows) == 0 {
		return errors.New("read wal_level: no answer")
	}
	if level := string(res[0].Rows[0][0]); level != "logical" {
		return fmt.Errorf("%w: the server runs with wal_level=%s; set wal_level = logical in postgresql.conf (or ALTER SYSTEM SET wal_level = logical) and restart PostgreSQL to use the WAL stream", ErrWALLevel, level)
	}
	return nil
}

// ensureSlot creates the slot unless it exists.
func ensureSlot(ctx context.Context, conn *pgconn.PgConn, slot string) error {
	_, err := pglogrepl.CreateReplicationSlot(ctx, conn, slot, "pgoutput", pglogrepl.CreateReplicationSlotOptions{})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42710" { // duplicate_object: it exists
		return nil
	}
	if err != nil {
		return fmt.Errorf("create replication slot %s: %w", slot, err)
	}
	return nil
}

// DropSlot drops a WAL consumer's slot, releasing the WAL it retains: on
// Citus, the slot on every node the stream reads.
func DropSlot(ctx context.Context, connString, slot string) error {
	if err := validSlot(slot); err != nil {
		return err
	}
	nodes, err := walNodes(ctx, ffdtype.WALConfig{ConnString: connString})
	if err != nil {
		return err
	}
	for _, node := range nodes {
		conn, err := replicationConn(ctx, node)
		if err != nil {
			return err
		}
		err = pglogrepl.DropReplicationSlot(ctx, conn, slot, pglogrepl.DropReplicationSlotOptions{Wait: true})
		conn.Close(context.WithoutCancel(ctx))
		var pgErr *pgconn.PgError
		if len(nodes) > 1 && errors.As(err, &pgErr) && pgErr.Code == "42704" {
			continue // undefined_object: a node added since the stream last ran
		}
		if err != nil {
			return fmt.Errorf("drop replication slot %s on %s:%d: %w", slot, node.Host, node.Port, err)
		}
	}
	return nil
}

// ErrNodesChanged is returned by StreamWAL on Citus when the nodes that
// hold the outbox changed while it streamed (a node added or removed):
// it is transient, and the next StreamWAL streams from the new set.
var ErrNodesChanged = errors.New("the outbox's worker nodes changed")

// DefaultNodeCheckInterval is how often a stream over several nodes reads
// the coordinator's list of them again.
const DefaultNodeCheckInterval = 30 * time.Second

// walNodes returns the servers whose WAL holds the outbox: the database
// itself, or on Citus every worker node that holds (or may hold) a shard
// of it, each with ConnString's settings and its own address (or
// cfg.Nodes, when given).
func walNodes(ctx context.Context, cfg ffdtype.WALConfig) ([]*pgconn.Config, error) {
	base, err := connConfig(cfg.ConnString, cfg.Session)
	if err != nil {
		return nil, err
	}
	found, err := outboxNodes(ctx, base)
	if err != nil || len(found) == 0 {
		return []*pgconn.Config{&base.Config}, err
	}
	var nodes []*pgconn.Config
	if len(cfg.Nodes) > 0 {
		for _, cs := range cfg.Nodes {
			node, err := connConfig(cs, cfg.Session)
			if err != nil {
				return nil, fmt.Errorf("WAL node %q: %w", cs, err)
			}
			nodes = append(nodes, &node.Config)
		}
	} else {
		for _, n := range found {
			nodes = append(nodes, at(&base.Config, n))
		}
	}
	for _, node := range nodes {
		// Citus's decoder names the shards' rows by their distributed
		// table and leaves out what its own shard moves copy: the stream
		// asks for it on its sessions, whatever the nodes' default.
		node.RuntimeParams[citusCDC] = "on"
	}
	return nodes, nil
}

// at is cfg pointed at node n: its own host and port, in the TLS and
// plain attempts alike (sslmode=prefer tries both).
func at(cfg *pgconn.Config, n store.Node) *pgconn.Config {
	c := cfg.Copy()
	c.Host, c.Port = n.Host, n.Port
	if c.TLSConfig != nil {
		c.TLSConfig.ServerName = n.Host
	}
	for _, fb := range c.Fallbacks {
		fb.Host, fb.Port = n.Host, n.Port
		if fb.TLSConfig != nil {
			fb.TLSConfig.ServerName = n.Host
		}
	}
	return c
}

// citusCDC is Citus's setting that puts its logical decoder in front of
// pgoutput.
const citusCDC = "citus.enable_change_data_capture"

// outboxNodes reads store.OutboxNodes over a plain connection of cfg.
func outboxNodes(ctx context.Context, cfg *pgx.ConnConfig) ([]store.Node, error) {
	conn, err := pgx.ConnectConfig(ctx, cfg.Copy())
	if err != nil {
		return nil, fmt.Errorf("find the outbox's nodes: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return store.OutboxNodes(ctx, conn)
}

// StreamWAL follows both outboxes from the slot's confirmed position until
// ctx ends (returning nil), the handler fails or the connection drops
// (returning the error; call it again to resume: nothing acknowledged is
// lost, nothing unacknowledged is skipped). On Citus it streams from every
// worker node at once, a slot of the same name on each: commit order holds
// per node, and a transaction that wrote on two nodes arrives as two
// handler calls.
func StreamWAL(ctx context.Context, cfg ffdtype.WALConfig) error {
	if cfg.Handler == nil {
		return errors.New("outbox: StreamWAL needs a handler")
	}
	if err := validSlot(cfg.Slot); err != nil {
		return err
	}
	if cfg.StatusInterval <= 0 {
		cfg.StatusInterval = DefaultStatusInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Session != nil {
		if err := session.Validate(*cfg.Session); err != nil {
			return err
		}
	}
	nodes, err := walNodes(ctx, cfg)
	if err != nil {
		return err
	}
	if len(nodes) == 1 {
		return streamNode(ctx, cfg, nodes[0], cfg.Slot, cfg.OnStart)
	}
	slots := make([]string, len(nodes))
	for i := range slots {
		slots[i] = cfg.Slot
	}
	return streamNodes(ctx, cfg, nodes, slots)
}

// streamNodes streams from each node at once, from the slot of the same
// index (the same name on each, but for a test). The handler is called
// for one node at a time; the first node to fail ends every stream, and
// a change in the cluster's nodes ends them with ErrNodesChanged.
func streamNodes(ctx context.Context, cfg ffdtype.WALConfig, nodes []*pgconn.Config, slots []string) error {
	var mu sync.Mutex
	handler := cfg.Handler
	cfg.Handler = func(ctx context.Context, ev []ffdtype.OutboxEvent) error {
		mu.Lock()
		defer mu.Unlock()
		return handler(ctx, ev)
	}
	var started atomic.Int32
	onStart := func() {
		if int(started.Add(1)) == len(nodes) && cfg.OnStart != nil {
			cfg.OnStart()
		}
	}
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = fmt.Sprintf("%s:%d", n.Host, n.Port)
	}
	cfg.Logger.Info("WAL stream over worker nodes", zap.Strings("nodes", addrs), zap.String("slot", cfg.Slot))
	p := pool.New().WithContext(ctx).WithCancelOnError().WithFirstError()
	for i, node := range nodes {
		p.Go(func(ctx context.Context) error { return streamNode(ctx, cfg, node, slots[i], onStart) })
	}
	if len(cfg.Nodes) == 0 {
		p.Go(func(ctx context.Context) error { return watchNodes(ctx, cfg, addrs) })
	}
	err := p.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// watchNodes reads the outbox's nodes every DefaultNodeCheckInterval and
// fails with ErrNodesChanged when they differ from addrs.
func watchNodes(ctx context.Context, cfg ffdtype.WALConfig, addrs []string) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(DefaultNodeCheckInterval):
		}
		nodes, err := walNodes(ctx, cfg)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		now := make([]string, len(nodes))
		for i, n := range nodes {
			now[i] = fmt.Sprintf("%s:%d", n.Host, n.Port)
		}
		if !slices.Equal(now, addrs) {
			return fmt.Errorf("%w: %v, was %v", ErrNodesChanged, now, addrs)
		}
	}
}

// streamNode follows the slot on one server.
func streamNode(ctx context.Context, cfg ffdtype.WALConfig, node *pgconn.Config, slot string, onStart func()) error {
	conn, err := replicationConn(ctx, node)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := CheckWALLevel(ctx, conn); err != nil {
		return err
	}
	if err := ensureSlot(ctx, conn, slot); err != nil {
		return err
	}
	// LSN 0: the server starts at the slot's confirmed position.
	err = pglogrepl.StartReplication(ctx, conn, slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names '" + Publication + "'"},
	})
	if err != nil {
		return fmt.Errorf("start replication on slot %s at %s:%d: %w", slot, node.Host, node.Port, err)
	}
	if onStart != nil {
		onStart()
	}
	s := &walStream{cfg: cfg, slot: slot, conn: conn, relations: map[uint32]*pglogrepl.RelationMessage{}, types: pgtype.NewMap()}
	return s.run(ctx)
}

type walStream struct {
	cfg       ffdtype.WALConfig
	slot      string
	conn      *pgconn.PgConn
	relations map[uint32]*pglogrepl.RelationMessage
	types     *pgtype.Map
	acked     pglogrepl.LSN
	pending   []ffdtype.OutboxEvent
}

func (s *walStream) status(ctx context.Context) error {
	return pglogrepl.SendStandbyStatusUpdate(ctx, s.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: s.acked, WALFlushPosition: s.acked, WALApplyPosition: s.acked,
	})
}

func (s *walStream) run(ctx context.Context) error {
	next := time.Now().Add(s.cfg.StatusInterval)
	for {
		if time.Now().After(next) {
			if err := s.status(ctx); err != nil {
				return fmt.Errorf("standby status: %w", err)
			}
			next = time.Now().Add(s.cfg.StatusInterval)
		}
		rctx, cancel := context.WithDeadline(ctx, next)
		raw, err := s.conn.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if pgconn.Timeout(err) {
				continue
			}
			return fmt.Errorf("receive from slot %s: %w", s.slot, err)
		}
		if e, ok := raw.(*pgproto3.ErrorResponse); ok {
			return fmt.Errorf("slot %s: %s (SQLSTATE %s)", s.slot, e.Message, e.Code)
		}
		msg, ok := raw.(*pgproto3.CopyData)
		if !ok || len(msg.Data) == 0 {
			continue
		}
		switch msg.Data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			pkm, err := pglogrepl.ParsePrimaryKeepaliveMessage(msg.Data[1:])
			if err != nil {
				return err
			}
			// The position confirmed is only ever the end of a transaction
			// the handler accepted: the server's WAL end may lie beyond
			// transactions not yet decoded for us.
			if pkm.ReplyRequested {
				next = time.Time{}
			}
		case pglogrepl.XLogDataByteID:
			xld, err := pglogrepl.ParseXLogData(msg.Data[1:])
			if err != nil {
				return err
			}
			if err := s.handle(ctx, xld.WALData); err != nil {
				return err
			}
		}
	}
}

func (s *walStream) handle(ctx context.Context, data []byte) error {
	m, err := pglogrepl.Parse(data)
	if err != nil {
		return fmt.Errorf("decode WAL message: %w", err)
	}
	switch m := m.(type) {
	case *pglogrepl.RelationMessage:
		s.relations[m.RelationID] = m
	case *pglogrepl.BeginMessage:
		s.pending = s.pending[:0]
	case *pglogrepl.InsertMessage:
		rel, ok := s.relations[m.RelationID]
		if !ok {
			return fmt.Errorf("WAL insert into unknown relation %d", m.RelationID)
		}
		e, err := s.decode(rel, m.Tuple)
		if err != nil {
			return err
		}
		s.pending = append(s.pending, e)
	case *pglogrepl.CommitMessage:
		if len(s.pending) > 0 {
			if err := s.cfg.Handler(ctx, s.pending); err != nil {
				return fmt.Errorf("WAL handler: %w", err)
			}
		}
		s.pending = s.pending[:0]
		s.acked = m.TransactionEndLSN
		return s.status(ctx)
	}
	return nil
}

func (s *walStream) decode(rel *pglogrepl.RelationMessage, tuple *pglogrepl.TupleData) (ffdtype.OutboxEvent, error) {
	var e ffdtype.OutboxEvent
	switch rel.RelationName {
	case "ff_completion_event":
		e.Stream = ffdtype.StreamCompletion
	case "ff_lease_event":
		e.Stream = ffdtype.StreamLease
	default:
		return e, fmt.Errorf("WAL insert into unexpected table %s", rel.RelationName)
	}
	var exec *uuid.UUID
	for i, col := range tuple.Columns {
		if i >= len(rel.Columns) || col.DataType != 't' {
			continue // null or unchanged
		}
		name, text := rel.Columns[i].Name, string(col.Data)
		var err error
		switch name {
		case "event_id":
			e.EventID, err = strconv.ParseInt(text, 10, 64)
		case "txid":
			e.TxID, err = store.ParseTxID(text)
		case "partition_key":
			var v int64
			v, err = strconv.ParseInt(text, 10, 16)
			e.PartitionKey = int16(v)
		case "execution_id":
			var u uuid.UUID
			u, err = uuid.Parse(text)
			exec = &u
		case "flow_id":
			e.FlowID = text
		case "outcome":
			e.Outcome = text
		case "step":
			e.Step = text
		case "namespace":
			e.Namespace = text
		case "attempt":
			e.Attempt, err = strconv.Atoi(text)
		case "lease_epoch":
			e.LeaseEpoch, err = strconv.ParseInt(text, 10, 64)
		case "worker":
			e.Worker = text
		case "event_type":
			e.EventType = text
		case "occurred_at", "dispatched_at", "lease_expires_at":
			var t time.Time
			if err = s.types.Scan(rel.Columns[i].DataType, pgtype.TextFormatCode, col.Data, &t); err == nil {
				switch name {
				case "occurred_at":
					e.OccurredAt = t
				case "dispatched_at":
					e.DispatchedAt = &t
				default:
					e.LeaseExpiresAt = &t
				}
			}
		}
		if err != nil {
			return e, fmt.Errorf("decode %s.%s %q: %w", rel.RelationName, name, text, err)
		}
	}
	if exec != nil {
		e.ExecutionID = ffdtype.ExecutionID{Partition: e.PartitionKey, UUID: *exec}.String()
	}
	return e, nil
}
