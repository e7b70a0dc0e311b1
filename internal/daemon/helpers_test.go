package daemon_test

import (
	"os"
	"testing"

	"go.uber.org/zap"

	"github.com/flowfabric/ffd/internal/daemon"
)

func counterValue(t *testing.T, m *daemon.Metrics, name string) float64 {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var v float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mm := range mf.GetMetric() {
			v += mm.GetCounter().GetValue()
		}
	}
	return v
}

func testLogger(t *testing.T) *zap.Logger {
	if os.Getenv("FFD_TEST_DAEMON_LOGS") == "" {
		return zap.NewNop()
	}
	l, _ := zap.NewDevelopment(zap.IncreaseLevel(zap.InfoLevel))
	return l
}

func gaugeValue(t *testing.T, m *daemon.Metrics, name string) float64 {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			var v float64
			for _, mm := range mf.GetMetric() {
				v += mm.GetGauge().GetValue()
			}
			return v
		}
	}
	return 0
}
