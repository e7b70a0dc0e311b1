package daemon

import (
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
)

// Notifier reports the daemon's state to its supervisor.
type Notifier interface {
	// Notify sends sd_notify state lines (READY=1, STATUS=..., ...).
	Notify(state string)
	// WatchdogInterval is the supervisor's watchdog period (0: none).
	WatchdogInterval() time.Duration
}

// SystemdNotifier talks to systemd through $NOTIFY_SOCKET (go-systemd); it
// does nothing when the daemon is not run by systemd.
type SystemdNotifier struct{}

// Notify implements Notifier.
func (SystemdNotifier) Notify(state string) { _, _ = sd.SdNotify(false, state) }

// WatchdogInterval implements Notifier.
func (SystemdNotifier) WatchdogInterval() time.Duration {
	d, err := sd.SdWatchdogEnabled(false)
	if err != nil {
		return 0
	}
	return d
}

// NopNotifier reports nothing: for daemons run in-process (demo, bench,
// tests) that are not the supervised service.
type NopNotifier struct{}

// Notify implements Notifier.
func (NopNotifier) Notify(string) {}

// WatchdogInterval implements Notifier.
func (NopNotifier) WatchdogInterval() time.Duration { return 0 }
