package bench

import (
	"time"

	"github.com/jackc/pgx/v5"
)

type pgxTx = pgx.Tx

// silent is a Notifier for the in-process daemon (it is not the service).
type silent struct{}

func (silent) Notify(string)                   {}
func (silent) WatchdogInterval() time.Duration { return 0 }
