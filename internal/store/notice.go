package store

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/ffdtype"
)

// Notices are the notifications a write owes its listeners. The writer
// sends them itself, as the last statement of its own transaction
// (migration 00024 dropped the triggers that used to): a distributed
// Postgres runs a trigger on the node holding the shard, where the
// coordinator's listeners never hear it, and refuses to commit a
// two-phase transaction that sent one. The statement that sends them
// reads no table, so it runs where the session is.
//
// Each is computed from what the writer knows before it writes (the
// partitions and lanes it touches), so it rides in the writer's pipelined
// batch at no extra round trip. It may therefore announce a write that
// changed nothing (a fenced-out completion, a create that found its
// idempotency key taken); a listener then finds nothing to do, as it
// would after a lost race. Nothing relies on a notice arriving: the
// daemon's sweep and the workers' polls find what a lost one announced.
//
// One notification per channel, unless the payload would pass
// Postgres's limit (8000 bytes), when it is split. Payloads
// (docs/schema.md, "Notifications"):
//   - ChannelCompletion: the partitions of completion events to dispatch,
//     comma-separated, or empty when every event is born dispatched (an
//     outbox consumer is woken either way);
//   - ChannelLease: the partitions of lease events written, or DuePrefix
//     and a time (Unix milliseconds) at which executions put back for
//     later come due;
//   - ChannelReady: lanes that have work due, comma-separated;
//   - ChannelRevoke: partition:execution_id:epoch of each running lease
//     taken away, comma-separated; epoch 0 stands for whichever attempt
//     runs (an ending that takes any non-terminal state, which leaves no
//     attempt after it).
type Notices struct {
	items map[string][]string // channel → payload items, in order added
	seen  map[string]bool     // channel + "\x00" + item
	bare  map[string]bool     // channels owed a notification with no items
	dueAt time.Time           // the soonest due time owed, zero for none
}

// maxPayload keeps a payload under Postgres's 8000-byte limit.
const maxPayload = 7900

// add records item on channel once.
func (n *Notices) add(channel, item string) {
	n.init()
	k := channel + "\x00" + item
	if n.seen[k] {
		return
	}
	n.seen[k] = true
	n.items[channel] = append(n.items[channel], item)
}

// wake records a notification on channel that names nothing: a wake-up
// for its listeners (an outbox consumer), sent even when no item is.
func (n *Notices) wake(channel string) {
	n.init()
	n.bare[channel] = true
}

// init makes the maps of a zero Notices.
func (n *Notices) init() {
	if n.items == nil {
		n.items, n.seen, n.bare = map[string][]string{}, map[string]bool{}, map[string]bool{}
	}
}

// Completions owes the daemon the dispatch of completion events on
// partition (dispatch true), or only wakes the outbox's consumers (an
// event born dispatched).
func (n *Notices) Completions(partition int16, dispatch bool) {
	if dispatch {
		n.add(ChannelCompletion, strconv.Itoa(int(partition)))
		return
	}
	n.wake(ChannelCompletion)
}

// LeaseEvents owes the outbox's consumers lease events on partition.
func (n *Notices) LeaseEvents(partition int16) {
	n.add(ChannelLease, strconv.Itoa(int(partition)))
}

// Ready owes lane's workers a claim. Sub-flow steps are started by the
// daemon, not claimed by workers: their lane owes the daemons a nudge
// on ChannelEvent instead, which they listen on.
func (n *Notices) Ready(lane string) {
	if lane == SubflowLane {
		n.add(ChannelEvent, EventSubflow)
		return
	}
	n.add(ChannelReady, lane)
}

// due owes the daemon a timer at at, when executions put back for later
// come due: one per Notices, the soonest.
func (n *Notices) due(at time.Time) {
	if n.dueAt.IsZero() || at.Before(n.dueAt) {
		n.dueAt = at
	}
}

// Revoked owes the holder of id's lease at epoch (0: whichever attempt
// runs) the news that it is gone.
func (n *Notices) Revoked(id ffdtype.ExecutionID, epoch int64) {
	n.add(ChannelRevoke, strconv.Itoa(int(id.Partition))+":"+id.UUID.String()+":"+strconv.FormatInt(epoch, 10))
}

// Empty reports whether nothing is owed.
func (n *Notices) Empty() bool { return len(n.items) == 0 && len(n.bare) == 0 && n.dueAt.IsZero() }

// payloads returns the channels and payloads to send, in Channels order.
func (n *Notices) payloads() (channels, payloads []string) {
	for _, c := range Channels {
		items := n.items[c]
		if c == ChannelLease && !n.dueAt.IsZero() {
			items = append(slices.Clip(items), DuePrefix+strconv.FormatInt(n.dueAt.UnixMilli(), 10))
		}
		if len(items) == 0 {
			if n.bare[c] {
				channels, payloads = append(channels, c), append(payloads, "")
			}
			continue
		}
		var b strings.Builder
		for _, it := range items {
			if b.Len() > 0 && b.Len()+1+len(it) > maxPayload {
				channels, payloads = append(channels, c), append(payloads, b.String())
				b.Reset()
			}
			if b.Len() > 0 {
				b.WriteByte(',')
			}
			b.WriteString(it)
		}
		channels, payloads = append(channels, c), append(payloads, b.String())
	}
	return channels, payloads
}

// notifySQL sends every notice in one statement. It reads no table, so a
// distributed Postgres runs it on the node the session is connected to.
const notifySQL = `SELECT count(pg_notify(c, p)) FROM unnest($1::text[], $2::text[]) AS n(c, p)`

// Queue appends the statement that sends the notices to b, when any is
// owed: the batch's transaction sends them at commit.
func (n *Notices) Queue(b *pgx.Batch) {
	if n.Empty() {
		return
	}
	cs, ps := n.payloads()
	b.Queue(notifySQL, cs, ps)
}

// Send sends the notices in db's transaction (with a pool: at once).
func (n *Notices) Send(ctx context.Context, db DB) error {
	if n.Empty() {
		return nil
	}
	cs, ps := n.payloads()
	_, err := db.Exec(ctx, notifySQL, cs, ps)
	return wrap("send notifications", err)
}

// SplitPayload splits a payload into its items (none for an empty one).
func SplitPayload(p string) []string {
	if p == "" {
		return nil
	}
	return strings.Split(p, ",")
}

// ParsePartitions reads a ChannelCompletion or ChannelLease payload of
// partitions; ok is false when it holds anything else.
func ParsePartitions(p string) (parts []int16, ok bool) {
	for _, s := range SplitPayload(p) {
		v, err := strconv.ParseInt(s, 10, 16)
		if err != nil || v < 0 || v >= ffdtype.Partitions {
			return nil, false
		}
		if !slices.Contains(parts, int16(v)) {
			parts = append(parts, int16(v))
		}
	}
	return parts, true
}

// queryNotifying runs sql, reading its rows with scan, and sends n in the
// same pipelined batch: one round trip, and one transaction (the batch's
// own, or the caller's), so a rolled-back write sends nothing.
func queryNotifying(ctx context.Context, db DB, n *Notices, scan func(pgx.Rows) error, sql string, args ...any) error {
	if n.Empty() {
		rows, err := db.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		return scan(rows)
	}
	b := &pgx.Batch{}
	b.Queue(sql, args...).Query(scan)
	n.Queue(b)
	return db.SendBatch(ctx, b).Close()
}

// readyNotices are the notices owed for inserting rs: their lanes, for
// those born pending and due.
func readyNotices(rs ...NewExecution) *Notices {
	n := &Notices{}
	for i := range rs {
		if rs[i].State == ffdtype.StatePending && rs[i].Delay <= 0 {
			n.Ready(rs[i].Lane)
		}
	}
	return n
}
