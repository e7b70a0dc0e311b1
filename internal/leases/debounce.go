package leases

import (
	"time"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/fault"
)

// MaxDebounceWindow bounds Debounce.Window and MaxWait.
const MaxDebounceWindow = 366 * 24 * time.Hour

// validateDebounce checks a create's debounce, filling its mode.
func validateDebounce(p *ffdtype.CreateParams, place Placement) error {
	d := p.Debounce
	if d == nil {
		return nil
	}
	switch {
	case place.FlowID != nil:
		return fault.Invalid(ffdtype.KindInvalidValue, "debounce.key", d.Key, "debounce is for a solo execution, not a flow member")
	case p.IdempotencyKey != "" || p.UniqueKey != "":
		return fault.Invalid(ffdtype.KindInvalidValue, "debounce.key", d.Key, "give a debounce, an idempotency key or a unique key, not two")
	case p.Delay != 0:
		return fault.Invalid(ffdtype.KindInvalidValue, "delay", p.Delay.String(), "a debounced create runs by its window: no delay")
	}
	if d.Key == "" {
		return fault.Invalid(ffdtype.KindRequired, "debounce.key", "", "a debounce needs a key")
	}
	if err := ValidateText("debounce.key", d.Key, MaxIdempotencyKey); err != nil {
		return err
	}
	if d.Window < time.Millisecond || d.Window > MaxDebounceWindow {
		return fault.Invalid(ffdtype.KindOutOfRange, "debounce.window", d.Window.String(), "want 1ms.."+MaxDebounceWindow.String())
	}
	switch d.Mode {
	case "":
		c := *d
		c.Mode = ffdtype.DebounceTrailing
		p.Debounce = &c // the caller's struct stays as given
	case ffdtype.DebounceTrailing, ffdtype.DebounceLeading:
	default:
		return fault.Invalid(ffdtype.KindInvalidValue, "debounce.mode", string(d.Mode), "want trailing or leading")
	}
	if d.MaxWait == 0 {
		return nil
	}
	if p.Debounce.Mode == ffdtype.DebounceLeading {
		return fault.Invalid(ffdtype.KindInvalidValue, "debounce.max_wait", d.MaxWait.String(), "a leading debounce runs at once: max wait is for trailing ones")
	}
	if d.MaxWait < d.Window || d.MaxWait > MaxDebounceWindow {
		return fault.Invalid(ffdtype.KindOutOfRange, "debounce.max_wait", d.MaxWait.String(), "want 0 (none) or the window ("+d.Window.String()+").."+MaxDebounceWindow.String())
	}
	return nil
}
