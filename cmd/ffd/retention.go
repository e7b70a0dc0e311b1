package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/bound"
	"github.com/flowfabric/ffd/internal/fault"
)

// forever is how the retention flags spell "keep forever".
const forever = "forever"

// retention is a retention flag's value: an age, or forever. The CLI and
// the Go API (ffd.DaemonConfig: 0 is the default, ffd.KeepForever keeps)
// share no spelling of 0, so a setting copied from one to the other
// cannot turn "keep forever" into "delete after the default": 0 is
// refused here.
type retention struct {
	age  time.Duration
	keep bool // forever
}

// UnmarshalText reads "forever" or a positive Go duration (720h).
func (r *retention) UnmarshalText(b []byte) error {
	s := strings.TrimSpace(string(b))
	if strings.EqualFold(s, forever) {
		*r = retention{keep: true}
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q: want an age such as 720h, or forever", s)
	}
	if d == 0 {
		return fmt.Errorf("0 is ambiguous (earlier releases of ffd run read it as forever; the Go API reads it as the default): write forever to keep everything, or an age such as 720h")
	}
	*r = retention{age: d}
	return nil
}

func (r retention) String() string {
	if r.keep {
		return forever
	}
	return r.age.String()
}

// check refuses an age outside the daemon's range. The zero value
// (never parsed from a flag: parsing refuses 0) is Go code's "unset",
// which internal/daemon reads as forever.
func (r retention) check(name string) error {
	if r.keep || r.age == 0 {
		return nil
	}
	if r.age < bound.OutboxRetention.Min || r.age > bound.OutboxRetention.Max {
		return fault.Invalid(ffdtype.KindOutOfRange, name, r.age.String(),
			fmt.Sprintf("want %s..%s, or forever", bound.OutboxRetention.Min, bound.OutboxRetention.Max))
	}
	return nil
}

// internal is the value internal/daemon takes: 0 keeps forever.
func (r retention) internal() time.Duration {
	if r.keep {
		return 0
	}
	return r.age
}

// dead is the value internal/daemon's DeadLetterRetention takes: 0 (the
// flag unset) as other executions, less than 0 forever.
func (r retention) dead() time.Duration {
	if r.keep {
		return -1
	}
	return r.age
}

// namespaceRetentions is --namespace-retention: namespace=age pairs
// separated by ";", each age as a retention.
type namespaceRetentions map[string]retention

// UnmarshalText reads "audit=forever;scratch=24h", naming the pair that
// is wrong.
func (m *namespaceRetentions) UnmarshalText(b []byte) error {
	out := namespaceRetentions{}
	for _, pair := range strings.Split(string(b), ";") {
		if strings.TrimSpace(pair) == "" {
			continue
		}
		ns, age, ok := strings.Cut(pair, "=")
		if !ok {
			return fmt.Errorf("%q: want namespace=age (an age such as 720h, or forever)", pair)
		}
		var r retention
		if err := r.UnmarshalText([]byte(age)); err != nil {
			return fmt.Errorf("namespace %s: %w", strings.TrimSpace(ns), err)
		}
		out[strings.TrimSpace(ns)] = r
	}
	*m = out
	return nil
}
