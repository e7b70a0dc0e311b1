package leases

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/fault"
)

// Bounds of flow control (docs/flow-control.md).
const (
	// MaxKeyLength bounds a concurrency key, in bytes.
	MaxKeyLength = 256
	// MaxKeyLimit bounds a key's running limit.
	MaxKeyLimit = 1_000_000
	// MaxRateCount bounds a rate's count.
	MaxRateCount = 1_000_000
	// MinRatePer and MaxRatePer bound a rate's interval.
	MinRatePer = time.Millisecond
	MaxRatePer = 24 * time.Hour
	// MaxKeyWeight bounds a key's weight.
	MaxKeyWeight = 1000
)

// ValidateKey checks a concurrency key: 1 to MaxKeyLength bytes of UTF-8
// without control characters (they would garble logs and the CLI's
// tables).
func ValidateKey(field, key string) error {
	if key == "" {
		return fault.Invalid(ffdtype.KindRequired, field, "", "a key is required")
	}
	if err := ValidateText(field, key, MaxKeyLength); err != nil {
		return err
	}
	if strings.IndexFunc(key, unicode.IsControl) >= 0 {
		return fault.Invalid(ffdtype.KindInvalidValue, field, strconv.Quote(key), "must not contain control characters")
	}
	return nil
}

// validateConcurrency checks an execution's concurrency key and limit.
func validateConcurrency(p *ffdtype.CreateParams) error {
	if p.ConcurrencyKey == "" {
		if p.ConcurrencyLimit != 0 {
			return fault.Invalid(ffdtype.KindInvalidValue, "concurrency_limit", strconv.Itoa(p.ConcurrencyLimit), "a limit needs a concurrency key")
		}
		return nil
	}
	if err := ValidateKey("concurrency_key", p.ConcurrencyKey); err != nil {
		return err
	}
	return ValidateKeyLimit("concurrency_limit", p.ConcurrencyLimit)
}

// ValidateKeyLimit checks a running limit: 0 (none, or unchanged) up to
// MaxKeyLimit.
func ValidateKeyLimit(field string, n int) error {
	if n < 0 || n > MaxKeyLimit {
		return fault.Invalid(ffdtype.KindOutOfRange, field, strconv.Itoa(n), fmt.Sprintf("want 0 (none) up to %d", MaxKeyLimit))
	}
	return nil
}

// ValidateWeight checks a key's weight.
func ValidateWeight(n int) error {
	if n < 1 || n > MaxKeyWeight {
		return fault.Invalid(ffdtype.KindOutOfRange, "weight", strconv.Itoa(n), fmt.Sprintf("want 1..%d", MaxKeyWeight))
	}
	return nil
}

// NormalizeRate checks a rate and fills its burst's default (one second's
// worth of the rate, at least 1, at most the count). A zero Count means
// no rate, and needs Per and Burst zero too.
func NormalizeRate(r *ffdtype.Rate) error {
	if r.Count == 0 {
		if r.Per != 0 || r.Burst != 0 {
			return fault.Invalid(ffdtype.KindInvalidValue, "rate", RateString(r), "a rate of 0 removes the limit: give no interval or burst")
		}
		return nil
	}
	if r.Count < 0 || r.Count > MaxRateCount {
		return fault.Invalid(ffdtype.KindOutOfRange, "rate.count", strconv.Itoa(r.Count), fmt.Sprintf("want 1..%d", MaxRateCount))
	}
	if r.Per < MinRatePer || r.Per > MaxRatePer {
		return fault.Invalid(ffdtype.KindOutOfRange, "rate.per", r.Per.String(), fmt.Sprintf("want %s..%s", MinRatePer, MaxRatePer))
	}
	if r.Burst == 0 {
		perSecond := float64(r.Count) * float64(time.Second) / float64(r.Per)
		r.Burst = max(1, min(r.Count, int(perSecond)))
	}
	if r.Burst < 1 || r.Burst > MaxRateCount {
		return fault.Invalid(ffdtype.KindOutOfRange, "rate.burst", strconv.Itoa(r.Burst), fmt.Sprintf("want 1..%d", MaxRateCount))
	}
	return nil
}

// RateString is r as the CLI writes it: count/interval, burst.
func RateString(r *ffdtype.Rate) string {
	if r == nil || r.Count == 0 {
		return "-"
	}
	return fmt.Sprintf("%d/%s burst %d", r.Count, r.Per, r.Burst)
}

// ParseRate parses count/interval ("600/1m", "10/s"; a bare unit means
// one of it), as the CLI takes a rate.
func ParseRate(s string) (ffdtype.Rate, error) {
	count, per, ok := strings.Cut(s, "/")
	if !ok {
		return ffdtype.Rate{}, fault.Invalid(ffdtype.KindInvalidValue, "rate", s, "want count/interval, such as 600/1m")
	}
	n, err := strconv.Atoi(strings.TrimSpace(count))
	if err != nil {
		return ffdtype.Rate{}, fault.Invalid(ffdtype.KindInvalidValue, "rate", s, "the count must be a whole number")
	}
	per = strings.TrimSpace(per)
	if per != "" && (per[0] < '0' || per[0] > '9') {
		per = "1" + per
	}
	d, err := time.ParseDuration(per)
	if err != nil {
		return ffdtype.Rate{}, fault.Invalid(ffdtype.KindInvalidValue, "rate", s, "the interval must be a duration, such as 1m or 10s")
	}
	return ffdtype.Rate{Count: n, Per: d}, nil
}
