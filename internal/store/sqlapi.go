package store

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"text/template"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/fault"
)

// apiTemplate is the SQL API (docs/sql.md): a template of the store's own
// statements and the Go API's limits.
//
//go:embed sqlapi.sql
var apiTemplate string

// APILimits are the Go API's input limits and defaults, which the SQL API
// enforces and fills the same way. They are defined above the store
// (internal/leases, internal/flows), whose caller passes them in.
type APILimits struct {
	DefaultNamespace                                   string
	DefaultMaxPayloadBytes, MaxMaxPayloadBytes         int
	MaxNameLength, MaxKindLength, MaxIdempotencyKey    int
	MaxCapabilities, MaxCapabilityLength, MaxTagsBytes int
	DefaultMaxAttempts, MaxMaxAttempts                 int
	MaxReasonBytes, MaxByBytes, MaxEventKey            int
	MaxCreateMany, MaxSubmitNodes, MaxSubmitEdges      int
	DefaultLeaseTTL                                    time.Duration
	DefaultBackoffBase, DefaultBackoffMax              time.Duration
	DefaultBackoffFactor, DefaultBackoffJitter         float64
	VersionCapabilityPrefix                            string
	DefaultCancelReason, DefaultCancelledBy            string
	FlowCancelReason, FlowCancelledBy                  string
	DefaultDependencyKind                              string
	// NamePattern and NameDetail are a name's form and its refusal's
	// detail (leases.NamePattern, leases.NameDetail).
	NamePattern, NameDetail string
	// Ranges are the integer fields' checks, by field, which the Go API
	// makes with fault.Range.Check and the template renders (check).
	Ranges map[string]fault.Range
	// SQLStates maps each error code to the SQLSTATE raised with it
	// (fault.SQLStates); MaxValue is how much of a value an error quotes.
	SQLStates map[string]string
	MaxValue  int
}

// apiStatements are the statements of the Go API that the SQL API runs,
// by the names the template gives them.
func apiStatements() map[string]string {
	return map[string]string{
		"Notify": notifySQL, "InsertExecution": insertExecutionSQL, "InsertKeyed": insertKeyedSQL,
		"KeyHolder": keyHolderSQL, "InsertMany": insertManySQL, "InsertFlow": insertFlowSQL,
		"InsertAppliedEdges": insertAppliedEdgesSQL, "InsertGroups": insertGroupsSQL, "SetFlowSize": setFlowSizeSQL,
		"Terminate": terminateSQL, "FinishFlows": finishFlowsSQL, "TerminateRouted": terminateRoutedSQL,
		"LockFlowsRouted": lockFlowsRoutedSQL, "FinishFlowsRouted": finishFlowsRoutedSQL, "GetExecution": getExecutionSQL,
		"LockMembers": lockMembersSQL, "LockFlow": lockFlowSQL, "CancelFlow": cancelFlowSQL,
		"AnchorLock": anchorLockSQL, "SendSignal": sendSignalSQL, "PublishEvent": publishEventSQL,
		"EventByKey": eventByKeySQL,
	}
}

func lit(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// checkRange renders r's check of the PL/pgSQL variable v (in the SQL
// API's unit), refusing it as an out_of_range error quoting value (an
// SQL expression) under the field prefix names.
func checkRange(r fault.Range, v, value string) (string, error) {
	if r.Field == "" {
		return "", errors.New("check: no such range")
	}
	scale := max(r.Scale, 1)
	if r.Min%scale != 0 || r.Max%scale != 0 {
		return "", fmt.Errorf("check %s: bounds %d..%d are not whole in the SQL API's unit", r.Field, r.Min, r.Max)
	}
	cond := fmt.Sprintf("%s BETWEEN %d AND %d", v, r.Min/scale, r.Max/scale)
	if r.None {
		cond = fmt.Sprintf("%s = 0 OR %s", v, cond)
	}
	return fmt.Sprintf("IF NOT (%s) THEN\n\t\tPERFORM ffd_invalid('out_of_range', prefix || %s, %s, %s);\n\tEND IF;",
		cond, lit(r.Field), value, lit(r.Detail)), nil
}

// APIFunctions renders the SQL API's functions for the schema ffd lives
// in.
func APIFunctions(schema string, l APILimits) (string, error) {
	const tag = "$ffdq$"
	q := func(s string) (string, error) {
		if strings.Contains(s, tag) {
			return "", fmt.Errorf("statement holds %s", tag)
		}
		return tag + s + tag, nil
	}
	funcs := template.FuncMap{
		// q quotes a statement as an SQL string literal, dollar-quoted so
		// that it reads as it does in Go.
		"q": q,
		// rows quotes a statement that writes and returns rows, wrapped
		// as a query of them: run INTO a variable, a distributed
		// Postgres's INSERT ... SELECT that returns no row otherwise
		// fails PL/pgSQL's check of the rows it processed.
		"rows":  func(s string) (string, error) { return q("WITH w AS (" + s + ") SELECT * FROM w") },
		"lit":   lit,
		"check": checkRange,
		"us":    func(d time.Duration) int64 { return d.Microseconds() },
	}
	t, err := template.New("sqlapi.sql").Funcs(funcs).Option("missingkey=error").Parse(apiTemplate)
	if err != nil {
		return "", fmt.Errorf("parse the SQL API's template: %w", err)
	}
	data := map[string]any{
		"L": l, "S": apiStatements(), "States": l.SQLStates, "Schema": schema, "MaxValue": l.MaxValue,
		"Partitions": ffdtype.Partitions, "LastPartition": ffdtype.Partitions - 1, "SubflowLane": SubflowLane,
		"ChannelReady": ChannelReady, "ChannelCompletion": ChannelCompletion, "ChannelRevoke": ChannelRevoke,
		"ChannelLease": ChannelLease, "ChannelEvent": ChannelEvent,
		"OutcomeCancelled":  string(ffdtype.OutcomeOf(ffdtype.StateCancelled)),
		"LeaseEndCancelled": string(LeaseEndOf(ffdtype.StateCancelled)),
	}
	var b strings.Builder
	if err := t.Execute(&b, data); err != nil {
		return "", fmt.Errorf("render the SQL API: %w", err)
	}
	// The digest of what was rendered marks the functions as this
	// binary's (APICurrent). The mark is a function's body, not a
	// comment: a distributed Postgres copies functions to every node but
	// not their comments, and a process may connect to any node.
	fmt.Fprintf(&b, "\nCREATE OR REPLACE FUNCTION ffd_api_mark() RETURNS text LANGUAGE sql IMMUTABLE AS %s;\n",
		apiMarkBody(apiMark(b.String())))
	return b.String(), nil
}

// apiMark is the comment that names the SQL API rendered as text.
func apiMark(text string) string {
	sum := sha256.Sum256([]byte(text))
	return "ffd SQL API " + hex.EncodeToString(sum[:8])
}

// apiMarkBody is the body of ffd_api_mark(), which returns mark; the
// same text as the function's stored source once unquoted.
func apiMarkBody(mark string) string { return "$ffdmark$SELECT '" + mark + "'$ffdmark$" }

// APICurrent reports whether the SQL API installed in the current schema
// is the one this binary renders (false when it is missing, or another
// binary's: `ffd migrate up` installs this one).
func APICurrent(ctx context.Context, db DB, l APILimits) (bool, error) {
	var schema string
	var mark *string
	err := db.QueryRow(ctx, `SELECT current_schema(), (SELECT prosrc FROM pg_proc WHERE oid = to_regprocedure('ffd_api_mark()')
		AND to_regprocedure('ffd_create(jsonb)') IS NOT NULL)`).
		Scan(&schema, &mark)
	if err != nil {
		return false, wrap("read the SQL API's mark", err)
	}
	text, err := APIFunctions(schema, l)
	if err != nil {
		return false, err
	}
	return mark != nil && strings.Contains(text, "$ffdmark$"+*mark+"$ffdmark$"), nil
}

// InstallAPI (re)creates the SQL API's functions in the schema ffd lives
// in (the connection's current schema), in one transaction: every `ffd
// migrate up` runs it, so that the functions always run this binary's
// statements. lockID serializes it with the migrations.
func InstallAPI(ctx context.Context, db DB, lockID int64, l APILimits) error {
	return InTx(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, lockID); err != nil {
			return fmt.Errorf("lock the schema: %w", err)
		}
		var schema string
		if err := tx.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
			return fmt.Errorf("read the current schema: %w", err)
		}
		sql, err := APIFunctions(schema, l)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, sql); err != nil {
			return fmt.Errorf("install the SQL API: %w", err)
		}
		return nil
	})
}
