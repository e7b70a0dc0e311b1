package cascade

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// SetStep installs a hook run between the statements of a dispatch.
func (d *Dispatcher) SetStep(step func(ctx context.Context, tx pgx.Tx, name string) error) {
	d.step = step
}
