package bench

import "testing"

// The scenario names users see and the functions Run dispatches to are
// one set: a name without a function, or a function nobody can name,
// fails here rather than at a user's command line.
func TestScenarioNamesMatchTheirFunctions(t *testing.T) {
	t.Parallel()
	for _, name := range Scenarios {
		if scenarios[name] == nil {
			t.Errorf("scenario %q is listed but has no function", name)
		}
	}
	if len(scenarios) != len(Scenarios) {
		t.Errorf("%d scenario functions for %d listed names", len(scenarios), len(Scenarios))
	}
}
