package fault_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/fault"
)

// typedFrom builds one of the typed errors from fuzzed fields.
func typedFrom(which uint8, a, b, c string, n, m int64) error {
	switch which % 5 {
	case 0:
		return &ffdtype.ValidationError{Kind: ffdtype.ValidationKind(a), Field: b, Value: c, Detail: a + b}
	case 1:
		return &ffdtype.NotFoundError{Object: a, ID: b}
	case 2:
		return &ffdtype.ConflictError{Object: a, ID: b, Reason: c}
	case 3:
		return &ffdtype.LeaseLostError{ExecutionID: a, Epoch: n, CurrentEpoch: m, State: c}
	}
	return &ffdtype.AlreadyTerminalError{Object: a, ID: b, State: c}
}

// A typed error survives the wire, as JSON in an error answer of the
// worker protocol and as an SQL API error's SQLSTATE and DETAIL: what
// comes back is the same type with the same fields, and matches the same
// sentinel.
func FuzzWireRoundTrip(f *testing.F) {
	f.Add(uint8(0), "invalid_value", "lane", "no spaces", int64(0), int64(0))
	f.Add(uint8(3), "{fp:1}:0190", "", "cancelled", int64(2), int64(3))
	f.Add(uint8(2), "flow", "0190", "a flow with this id already exists", int64(0), int64(0))
	f.Fuzz(func(t *testing.T, which uint8, a, b, c string, n, m int64) {
		if !utf8.ValidString(a) || !utf8.ValidString(b) || !utf8.ValidString(c) {
			// JSON carries text; ffd's errors quote input made valid
			// UTF-8 first (leases.ValidateText).
			return
		}
		want := typedFrom(which, a, b, c, n, m)
		if want == nil {
			return
		}
		w := fault.ToWire(want)
		raw, err := json.Marshal(w)
		if err != nil {
			t.Fatal(err)
		}
		var back fault.Wire
		if err := json.Unmarshal(raw, &back); err != nil {
			t.Fatal(err)
		}
		if got := back.Typed(); !reflect.DeepEqual(got, want) {
			t.Fatalf("through JSON: %#v, want %#v", got, want)
		}
		pg := &pgconn.PgError{Code: fault.SQLStates[w.Code], Message: w.Message, Detail: string(raw)}
		got := fault.FromPg(fmt.Errorf("call: %w", pg))
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("through SQL: %#v, want %#v", got, want)
		}
		for _, s := range []error{ffdtype.ErrValidation, ffdtype.ErrNotFound, ffdtype.ErrConflict, ffdtype.ErrLeaseLost, ffdtype.ErrAlreadyTerminal} {
			if errors.Is(got, s) != errors.Is(want, s) {
				t.Fatalf("errors.Is(%v, %v) differs after the wire", got, s)
			}
		}
	})
}

// What is not one of ffd's errors stays as it is: another SQLSTATE, a
// DETAIL that is not the wire's, a code whose SQLSTATE differs.
func TestFromPgLeavesOtherErrors(t *testing.T) {
	t.Parallel()
	for _, pg := range []*pgconn.PgError{
		{Code: "23505", Detail: `{"code": "conflict"}`},
		{Code: "FF001", Detail: "not JSON"},
		{Code: "FF002", Detail: `{"code": "validation", "message": "m"}`},
		{Code: "FF009", Detail: `{"code": "elsewhere"}`},
	} {
		if got := fault.FromPg(pg); got != error(pg) {
			t.Errorf("FromPg(%s %q) = %v, want the error itself", pg.Code, pg.Detail, got)
		}
	}
	if w := fault.ToWire(errors.New("the database's own words")); w.Code != fault.CodeInternal || w.Message != "internal error" {
		t.Errorf("an untyped error on the wire: %+v, want internal with its message withheld", w)
	}
}
