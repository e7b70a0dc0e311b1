package daemon_test

import (
	"testing"

	"github.com/flowfabric/ffd/internal/daemon"
)

// counterValue is a counter's value summed over its labels.
func counterValue(t *testing.T, m *daemon.Metrics, name string) float64 {
	t.Helper()
	return labelValue(t, m, name, "", "")
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

// labelValue is a counter's value for one label value, or summed over all
// of them when label is "".
func labelValue(t *testing.T, m *daemon.Metrics, name, label, value string) float64 {
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
			match := label == ""
			for _, lp := range mm.GetLabel() {
				match = match || lp.GetName() == label && lp.GetValue() == value
			}
			if match {
				v += mm.GetCounter().GetValue()
			}
		}
	}
	return v
}
