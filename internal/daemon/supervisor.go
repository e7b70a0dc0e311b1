package daemon

import (
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
)

// Supervisor is what the daemon reports its state to: systemd's
// sd_notify socket, or nothing. (LISTEN/NOTIFY is the listener's, a
// different thing.)
type Supervisor interface {
	// Notify sends sd_notify state lines (READY=1, STATUS=..., ...).
	Notify(state string)
	// WatchdogInterval is the supervisor's watchdog period (0: none).
	WatchdogInterval() time.Duration
}

// SystemdSupervisor talks to systemd through $NOTIFY_SOCKET (go-systemd); it
// does nothing when the daemon is not run by systemd.
type SystemdSupervisor struct{}

// Notify implements Supervisor.
func (SystemdSupervisor) Notify(state string) { _, _ = sd.SdNotify(false, state) }

// WatchdogInterval implements Supervisor.
func (SystemdSupervisor) WatchdogInterval() time.Duration {
	d, err := sd.SdWatchdogEnabled(false)
	if err != nil {
		return 0
	}
	return d
}

// NopSupervisor reports nothing: for daemons run in-process (demo, bench,
// tests) that are not the supervised service.
type NopSupervisor struct{}

// Notify implements Supervisor.
func (NopSupervisor) Notify(string) {}

// WatchdogInterval implements Supervisor.
func (NopSupervisor) WatchdogInterval() time.Duration { return 0 }
