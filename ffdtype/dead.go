package ffdtype

// DeadLetterFilter selects dead letters: solo executions that ended
// failed or expired (their attempts spent, a permanent failure, a lapsed
// deadline) and have not been rerun. Empty fields select any; IDs
// excludes the other fields.
type DeadLetterFilter struct {
	// IDs selects these executions, each of which must be a dead letter.
	IDs []ExecutionID
	// Namespace, Lane and Kind select by equality.
	Namespace string
	Lane      string
	Kind      string
	// ErrorContains selects those whose last error contains it, in any
	// case.
	ErrorContains string
}

// Empty reports a filter that selects every dead letter.
func (f DeadLetterFilter) Empty() bool {
	return len(f.IDs) == 0 && f.Namespace == "" && f.Lane == "" && f.Kind == "" && f.ErrorContains == ""
}

// ListDeadParams pages through dead letters in id (creation) order.
type ListDeadParams struct {
	DeadLetterFilter
	// After is the cursor: the previous page's Next.
	After *ExecutionID
	// Limit is 1..1000; 0 means 100.
	Limit int
}

// RerunDeadParams selects dead letters to run again, each as a new
// execution (as RerunExecution does), in bulk.
type RerunDeadParams struct {
	DeadLetterFilter
	// All must be set to select every dead letter (an empty filter is
	// refused otherwise, so a forgotten flag reruns nothing).
	All bool
	// DryRun selects and returns what would be rerun, writing nothing.
	DryRun bool
	// Limit bounds one call: 1..10,000; 0 means 1,000. DeadRerun.More
	// says when more matched.
	Limit int
}

// DeadRerun is what RerunDeadLetters selected and did.
type DeadRerun struct {
	// DryRun: nothing was written.
	DryRun bool
	// Selected are the dead letters the filter matched (at most Limit),
	// in id order.
	Selected []*Execution
	// Reruns are the new executions, in the order of Selected; each
	// one's RerunOf names its dead letter. A dead letter another caller
	// reran meanwhile is left out: it is rerun once.
	Reruns []*Execution
	// More: more dead letters matched than Limit.
	More bool
}
