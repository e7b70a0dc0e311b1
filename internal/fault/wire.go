package fault

import (
	"encoding/json"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/flowfabric/ffd/ffdtype"
)

// Wire is a typed error as the languages outside Go see it: in the body
// of an error answer of the worker protocol, and, encoded as JSON, in the
// DETAIL of an error the SQL API raises (docs/sql.md, "Errors"). Code is
// stable; the other fields are those of the typed error it stands for.
type Wire struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Validation.
	Kind   string `json:"kind,omitempty"`
	Field  string `json:"field,omitempty"`
	Value  string `json:"value,omitempty"`
	Detail string `json:"detail,omitempty"`
	// Not found, conflict, already terminal: the object and its id.
	Object string `json:"object,omitempty"`
	ID     string `json:"id,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Lease lost and already terminal: the state found; lease lost: the
	// epochs.
	State        string `json:"state,omitempty"`
	Epoch        int64  `json:"epoch,omitempty"`
	CurrentEpoch int64  `json:"current_epoch,omitempty"`
}

// The stable codes, and the SQLSTATE the SQL API raises each with: class
// FF, ffd's own (Postgres leaves classes beginning with a letter past
// its own to applications).
const (
	CodeValidation      = "validation"
	CodeNotFound        = "not_found"
	CodeConflict        = "conflict"
	CodeLeaseLost       = "lease_lost"
	CodeAlreadyTerminal = "already_terminal"
	CodeInternal        = "internal"
)

// SQLStates maps each code to its SQLSTATE; the SQL API raises these
// (rendered from this map), and FromPg reads them back.
var SQLStates = map[string]string{
	CodeValidation:      "FF001",
	CodeNotFound:        "FF002",
	CodeConflict:        "FF003",
	CodeLeaseLost:       "FF004",
	CodeAlreadyTerminal: "FF005",
}

// ToWire describes err for the wire; an error that is none of the typed
// ones is CodeInternal, its message withheld from callers (it may name
// the database's internals); the caller logs it.
func ToWire(err error) Wire {
	var (
		v *ffdtype.ValidationError
		n *ffdtype.NotFoundError
		c *ffdtype.ConflictError
		l *ffdtype.LeaseLostError
		t *ffdtype.AlreadyTerminalError
	)
	switch {
	case errors.As(err, &v):
		return Wire{Code: CodeValidation, Message: v.Error(), Kind: string(v.Kind), Field: v.Field, Value: v.Value, Detail: v.Detail}
	case errors.As(err, &n):
		return Wire{Code: CodeNotFound, Message: n.Error(), Object: n.Object, ID: n.ID}
	case errors.As(err, &c):
		return Wire{Code: CodeConflict, Message: c.Error(), Object: c.Object, ID: c.ID, Reason: c.Reason}
	case errors.As(err, &l):
		return Wire{Code: CodeLeaseLost, Message: l.Error(), ID: l.ExecutionID, State: l.State, Epoch: l.Epoch, CurrentEpoch: l.CurrentEpoch}
	case errors.As(err, &t):
		return Wire{Code: CodeAlreadyTerminal, Message: t.Error(), Object: t.Object, ID: t.ID, State: t.State}
	}
	return Wire{Code: CodeInternal, Message: "internal error"}
}

// Typed is the typed error w stands for; nil for CodeInternal or a code
// it does not know.
func (w Wire) Typed() error {
	switch w.Code {
	case CodeValidation:
		return &ffdtype.ValidationError{Kind: ffdtype.ValidationKind(w.Kind), Field: w.Field, Value: w.Value, Detail: w.Detail}
	case CodeNotFound:
		return &ffdtype.NotFoundError{Object: w.Object, ID: w.ID}
	case CodeConflict:
		return &ffdtype.ConflictError{Object: w.Object, ID: w.ID, Reason: w.Reason}
	case CodeLeaseLost:
		return &ffdtype.LeaseLostError{ExecutionID: w.ID, Epoch: w.Epoch, CurrentEpoch: w.CurrentEpoch, State: w.State}
	case CodeAlreadyTerminal:
		return &ffdtype.AlreadyTerminalError{Object: w.Object, ID: w.ID, State: w.State}
	}
	return nil
}

// FromPg is the typed error an SQL API function raised, read back from
// its SQLSTATE and DETAIL; any other error is returned as it is.
func FromPg(err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || len(pe.Code) != 5 || pe.Code[:2] != "FF" {
		return err
	}
	var w Wire
	if json.Unmarshal([]byte(pe.Detail), &w) != nil || SQLStates[w.Code] != pe.Code {
		return err
	}
	if t := w.Typed(); t != nil {
		return t
	}
	return err
}
