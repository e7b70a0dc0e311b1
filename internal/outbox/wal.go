package outbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgtype"
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

func replicationConn(ctx context.Context, connString string, guard *ffdtype.SessionConfig) (*pgconn.PgConn, error) {
	cfg, err := pgconn.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("replication connection: %w", err)
	}
	g := session.Default()
	if guard != nil {
		g = *guard
	}
	session.ApplyConn(g, cfg)
	cfg.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("replication connection: %w", err)
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

// DropSlot drops a WAL consumer's slot, releasing the WAL it retains.
func DropSlot(ctx context.Context, connString, slot string) error {
	if err := validSlot(slot); err != nil {
		return err
	}
	conn, err := replicationConn(ctx, connString, nil)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := pglogrepl.DropReplicationSlot(ctx, conn, slot, pglogrepl.DropReplicationSlotOptions{Wait: true}); err != nil {
		return fmt.Errorf("drop replication slot %s: %w", slot, err)
	}
	return nil
}

// StreamWAL follows both outboxes from the slot's confirmed position until
// ctx ends (returning nil), the handler fails or the connection drops
// (returning the error; call it again to resume: nothing acknowledged is
// lost, nothing unacknowledged is skipped).
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
	conn, err := replicationConn(ctx, cfg.ConnString, cfg.Session)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := CheckWALLevel(ctx, conn); err != nil {
		return err
	}
	if err := ensureSlot(ctx, conn, cfg.Slot); err != nil {
		return err
	}
	// LSN 0: the server starts at the slot's confirmed position.
	err = pglogrepl.StartReplication(ctx, conn, cfg.Slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names '" + Publication + "'"},
	})
	if err != nil {
		return fmt.Errorf("start replication on slot %s: %w", cfg.Slot, err)
	}
	if cfg.OnStart != nil {
		cfg.OnStart()
	}
	s := &walStream{cfg: cfg, conn: conn, relations: map[uint32]*pglogrepl.RelationMessage{}, types: pgtype.NewMap()}
	return s.run(ctx)
}

type walStream struct {
	cfg       ffdtype.WALConfig
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
			return fmt.Errorf("receive from slot %s: %w", s.cfg.Slot, err)
		}
		if e, ok := raw.(*pgproto3.ErrorResponse); ok {
			return fmt.Errorf("slot %s: %s (SQLSTATE %s)", s.cfg.Slot, e.Message, e.Code)
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
