package daemon

// Reconnects counts the listener's reconnects, for fault tests.
func (d *Daemon) Reconnects() int64 {
	if d.listener == nil {
		return 0
	}
	return d.listener.Reconnects()
}
