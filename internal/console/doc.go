// Package console is ffd's web console: flows drawn as graphs that update
// live, executions with their attempts, lanes, and outbox consumers.
//
// It is served by ffd itself (`ffd console`, or the daemon's admin server
// with `ffd run --console`), with every asset embedded in the binary, so
// it works offline. Pages are rendered on the server (html/template); a
// flow page's live updates come over server-sent events driven by the
// engine's own notifications (ff_completion, ff_lease): one LISTEN
// connection, opened when the first page subscribes and closed when the
// last one leaves, so a console nobody looks at costs nothing.
package console
