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
	if err := ValidateName("lane", p.Lane); err != nil {
		return nil, err
	}
	if err := ValidateWorker(p.Worker); err != nil {
		return nil, err
	}
	if err := validateCapabilities("capabilities", p.Capabilities); err != nil {
		return nil, err
	}
	if p.Max < 1 || p.Max > MaxClaimBatch {
		return nil, fault.Invalid(ffdtype.KindOutOfRange, "max", strconv.Itoa(p.Max), fmt.Sprintf("want 1..%d", MaxClaimBatch))
	}
	caps := p.Capabilities
	if caps == nil {
		caps = []string{}
	}
	return store.Claim(ctx, db, p.Lane, caps, p.Max, p.Worker)
}
