package logging

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestNewValidates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		level, format string
		ok            bool
	}{
		{"info", "json", true},
		{"debug", "console", true},
		{"warn", "auto", true},
		{"error", "", true},
		{"loud", "json", false},
		{"info", "xml", false},
	}
	for _, tt := range tests {
		log, err := New(&bytes.Buffer{}, tt.level, tt.format)
		if (err == nil) != tt.ok {
			t.Errorf("New(%q, %q) error = %v, want ok=%v", tt.level, tt.format, err, tt.ok)
		}
		if err == nil && log == nil {
			t.Errorf("New(%q, %q) returned a nil logger", tt.level, tt.format)
		}
	}
}

func TestJSONFields(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log, err := New(&buf, "info", FormatJSON)
	if err != nil {
		t.Fatal(err)
	}
	log.Debug("hidden")
	log.Info("claimed")
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("want one JSON line at info, got %q: %v", buf.String(), err)
	}
	if line["msg"] != "claimed" || line["level"] != "info" || line["ts"] == nil {
		t.Fatalf("unexpected log line %v", line)
	}
}
