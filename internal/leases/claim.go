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

// ClaimParams asks for up to Max due executions of Lane.
type ClaimParams struct {
	Lane         string
	Worker       string   // "worker-id/instance", recorded as lease_owner and on the attempt
	Capabilities []string // the worker's; an execution is claimable when it requires a subset
	Max          int      // 1..MaxClaimBatch
}

// ValidateWorker checks a worker name.
func ValidateWorker(w string) error {
	if w == "" || len(w) > 256 {
		return fault.Invalid(ffdtype.KindInvalidValue, "worker", w, "want 1 to 256 bytes")
	}
	return nil
}

// Claim leases up to p.Max executions, in one statement.
func Claim(ctx context.Context, db store.DB, p ClaimParams) ([]*ffdtype.Execution, error) {
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
