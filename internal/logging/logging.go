// Package logging builds ffd's zap logger.
//
// Field names are stable across releases because operators build queries
// and alerts on them; the names every package uses are the constants below.
package logging

import (
	"fmt"
	"io"
	"os"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Stable field names.
const (
	FieldExecutionID = "execution_id"
	FieldFlowID      = "flow_id"
	FieldEventID     = "event_id"
	FieldLane        = "lane"
	FieldLeaseEpoch  = "lease_epoch"
	FieldWorker      = "worker"
	FieldStep        = "step"
	FieldKind        = "kind"
)

// Formats accepted by New.
const (
	FormatAuto    = "auto" // console when stderr is a terminal, else JSON
	FormatJSON    = "json"
	FormatConsole = "console"
)

// New builds a logger writing to w at level ("debug", "info", "warn",
// "error") in format (FormatAuto, FormatJSON or FormatConsole). FormatAuto
// picks console when w is a terminal.
func New(w io.Writer, level, format string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	switch format {
	case FormatAuto, "":
		format = FormatJSON
		if f, ok := w.(*os.File); ok {
			if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
				format = FormatConsole
			}
		}
	case FormatJSON, FormatConsole:
	default:
		return nil, fmt.Errorf("log format %q: want auto, json or console", format)
	}
	var enc zapcore.Encoder
	if format == FormatJSON {
		cfg := zap.NewProductionEncoderConfig()
		cfg.TimeKey = "ts"
		cfg.EncodeTime = zapcore.RFC3339NanoTimeEncoder
		enc = zapcore.NewJSONEncoder(cfg)
	} else {
		cfg := zap.NewDevelopmentEncoderConfig()
		cfg.EncodeLevel = zapcore.CapitalColorLevelEncoder
		enc = zapcore.NewConsoleEncoder(cfg)
	}
	core := zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), lvl)
	return zap.New(core, zap.AddCaller(), zap.ErrorOutput(zapcore.Lock(zapcore.AddSync(w)))), nil
}
