package leases

import (
	"context"
	"fmt"
	"strconv"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/store"
)

// MaxClaimBatch bounds how many executions one claim may take.
const MaxClaimBatch = 1000

// ValidateWorker checks a worker name.
func ValidateWorker(w string) error {
	if w == "" || len(w) > 256 {
		return fault.Invalid(ffdtype.KindInvalidValue, "worker", w, "want 1 to 256 bytes")
	}
	return nil
}

// Claim leases up to p.Max executions, in one statement.
func Claim(ctx context.Context, db store.DB, p ffdtype.ClaimParams) ([]*ffdtype.Execution, error) {
	xs, _, err := ClaimThrottled(ctx, db, p)
	return xs, err
}

// ClaimThrottled is Claim that also says, when a lane under control gave
// less than asked, whether due executions wait behind its limits and when
// its next rate token comes (store.Throttle).
func ClaimThrottled(ctx context.Context, db store.DB, p ffdtype.ClaimParams) ([]*ffdtype.Execution, store.Throttle, error) {
	var none store.Throttle
	if err := ValidateName("lane", p.Lane); err != nil {
		return nil, none, err
	}
	if err := ValidateWorker(p.Worker); err != nil {
		return nil, none, err
	}
	if err := validateCapabilities("capabilities", p.Capabilities); err != nil {
		return nil, none, err
	}
	if p.Max < 1 || p.Max > MaxClaimBatch {
		return nil, none, fault.Invalid(ffdtype.KindOutOfRange, "max", strconv.Itoa(p.Max), fmt.Sprintf("want 1..%d", MaxClaimBatch))
	}
	caps := p.Capabilities
	if caps == nil {
		caps = []string{}
	}
	return store.ClaimThrottled(ctx, db, p.Lane, caps, p.Max, p.Worker)
}
