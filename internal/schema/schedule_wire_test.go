package schema_test

import (
	"encoding/json"
	"os"
	"reflect"
	"testing"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/schema"
)

// oldExecution is what encoding/json made of an execution's params before
// migration 23 (every field of the Go struct, durations in nanoseconds),
// with set as given.
func oldExecution(set string) string {
	return `{"Namespace":"","Lane":"","Kind":"","Payload":null,"Priority":0,"RequiredCapabilities":null,"MaxAttempts":0,` +
		`"Retry":{"Base":0,"Max":0,"Multiplier":0,"Jitter":0},"LeaseTTL":0,"AttemptTimeout":0,"Deadline":0,"Delay":0,` +
		`"IdempotencyKey":"","Tags":null,"Step":"","UniqueKey":"","UniqueWindow":0,"FlowID":null,"Partition":null,"Blocked":false,` + set + `}`
}

// Schedules stored before migration 23 are rewritten into the wire
// format (internal/schedule/wire.go, version 1) field for field: after
// the migration their rows equal the golden rows the schedule package
// decodes. Its Down section gives back rows that the structs of before
// read as they were stored.
func TestScheduleParamsMigrateToTheWireFormat(t *testing.T) {
	t.Parallel()
	ctx, db := migratedTo(t, 22)
	// encoding/json writes a map's keys sorted and takes the last of a
	// repeated key, so a field set again after the zero ones wins.
	exec := oldExecution(`"Lane":"reports","Kind":"nightly","Payload":"eyJkYXkiOjF9","Priority":5,"RequiredCapabilities":["gpu"],"MaxAttempts":4,` +
		`"Retry":{"Base":2000000000,"Max":60000000000,"Multiplier":3,"Jitter":0.2},"LeaseTTL":45000000000,"AttemptTimeout":600000000000,` +
		`"Deadline":3600000000000,"Delay":1500000000,"Tags":{"team":"data","none":null},"UniqueKey":"nightly","UniqueWindow":86400000000000`)
	flow := `{"Flow":{"ID":"00000000-0000-0000-0000-000000000000","Namespace":"","Kind":"etl","Tags":{"team":"data"}},"Nodes":[` +
		`{"Ref":"extract","Params":` + oldExecution(`"Lane":"io"`) + `,"Policy":null},` +
		`{"Ref":"load","Params":` + oldExecution(`"Lane":"db","MaxAttempts":2`) + `,"Policy":{"Kind":"quorum","K":1,"OnSatisfied":"cancel_remaining"}}],` +
		`"Edges":[{"From":"extract","To":"load","DependencyKind":"","DataPassingRef":"rows"}]}`
	for name, row := range map[string][2]string{"exec": {"execution", exec}, "flow": {"flow", flow}} {
		if _, err := db.Pool.Exec(ctx, `INSERT INTO ff_schedule (name, spec, target, params, next_run_at) VALUES ($1, '@hourly', $2, $3, now())`,
			name, row[0], row[1]); err != nil {
			t.Fatal(err)
		}
	}
	// What the structs of before read from the rows as stored.
	var beforeExec ffdtype.CreateParams
	var beforeFlow ffdtype.SubmitFlowParams
	if err := json.Unmarshal([]byte(exec), &beforeExec); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(flow), &beforeFlow); err != nil {
		t.Fatal(err)
	}

	if _, err := schema.Up(ctx, db.Pool, 0); err != nil {
		t.Fatal(err)
	}
	for name, file := range map[string]string{"exec": "wire_v1_execution.json", "flow": "wire_v1_flow.json"} {
		want, err := os.ReadFile("../wire/testdata/" + file)
		if err != nil {
			t.Fatal(err)
		}
		var same bool
		var got string
		if err := db.Pool.QueryRow(ctx, `SELECT params = $2::jsonb, params::text FROM ff_schedule WHERE name = $1`, name, string(want)).Scan(&same, &got); err != nil {
			t.Fatal(err)
		}
		if !same {
			t.Errorf("schedule %s after migration 23:\n%s\nwant the golden row\n%s", name, got, want)
		}
	}

	down(ctx, t, db, "00023_schedule_wire.sql")
	for name, want := range map[string]any{"exec": beforeExec, "flow": beforeFlow} {
		var raw []byte
		if err := db.Pool.QueryRow(ctx, `SELECT params FROM ff_schedule WHERE name = $1`, name).Scan(&raw); err != nil {
			t.Fatal(err)
		}
		got := reflect.New(reflect.TypeOf(want))
		if err := json.Unmarshal(raw, got.Interface()); err != nil {
			t.Fatalf("schedule %s after migration 23 down: %v (%s)", name, err, raw)
		}
		if !reflect.DeepEqual(got.Elem().Interface(), want) {
			t.Errorf("schedule %s after migration 23 down reads as\n%+v\nwant what was stored\n%+v", name, got.Elem().Interface(), want)
		}
	}
}
