package store

// ClaimSQL is the claim statement, for the plan test.
const ClaimSQL = claimSQL

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
