package store

import "reflect"

// ClaimSQL is the claim statement, for the plan test.
var ClaimSQL = claimSQL

// SetUniqueRaceHook steps into insertUnique, before each insert and after
// each refusal (nil: none). Tests that set it must not run beside other
// tests creating executions with unique keys in this package.
func SetUniqueRaceHook(beforeInsert, afterRefused func(key string)) {
	if beforeInsert == nil {
		uniqueRaceHook.Store(nil)
		return
	}
	uniqueRaceHook.Store(&uniqueRace{beforeInsert: beforeInsert, afterRefused: afterRefused})
}

// ExecColumns is execColumns, for the scan-order test.
const ExecColumns = execColumns

// ExecutionRowTags are executionRow's db tags in field order, and whether
// its scan destinations (dests) are its fields, in that order.
func ExecutionRowTags() (tags []string, inOrder bool) {
	var r executionRow
	typ := reflect.TypeOf(r)
	v := reflect.ValueOf(&r).Elem()
	dests := r.dests()
	inOrder = len(dests) == typ.NumField()
	for i := range typ.NumField() {
		tags = append(tags, typ.Field(i).Tag.Get("db"))
		if inOrder && reflect.ValueOf(dests[i]).Pointer() != v.Field(i).Addr().Pointer() {
			inOrder = false
		}
	}
	return tags, inOrder
}

// TerminateHeldSQL is the ending of held leases, TerminateSQL the ending
// of any, for the plan tests.
var TerminateHeldSQL, TerminateSQL = terminateHeldSQL, terminateSQL

// HotPlansSQL is what a worker's claims and completions set for their
// transactions, for the plan tests.
var HotPlansSQL = hotPlansSQL

// KeyTurnSQL is a keyed claim's turn, for the plan test.
var KeyTurnSQL = keyTurnSQL

// FinishFlowsSQL finishes the flows a batch of endings ended; ReadySQL
// and DecideSQL record a dispatch's decisions: for the plan tests.
var FinishFlowsSQL, ReadySQL, DecideSQL = finishFlowsSQL, recordSQL[false].ready, recordSQL[false].decide

// RenewSQL, SuspendSQL and RequeueSQL are fenced lookups by key, for the
// plan test.
var RenewSQL, SuspendSQL, RequeueSQL = renewSQL, suspendSQL, requeueSQL
