package daemon

// Reconnects counts the notifier's reconnects, for fault tests.
func (d *Daemon) Reconnects() int64 {
	if d.notifier == nil {
		return 0
	}
	return d.notifier.Reconnects()
}
