package x402

import (
	"errors"
	"fmt"
	"math/big"
	"strings"
)

// maxAmountChars bounds a human amount before parsing.
const maxAmountChars = 100

// MaxDecimals is the largest number of decimals ParseAmount and FormatAmount accept.
const MaxDecimals = 36

// ErrAmount is wrapped by every ParseAmount error.
var ErrAmount = errors.New("invalid amount")

// ParseAmount converts a human amount such as "0.01" into base units of a token with the
// given decimals (10000 for 6 decimals). It accepts only digits with at most one '.'
// between digits: no sign, exponent, spaces, thousands separators or currency symbol. A
// fraction with more digits than decimals is refused rather than rounded; trailing zeros
// do not count ("0.0100" is fine with 2 decimals). Errors wrap ErrAmount.
func ParseAmount(human string, decimals int) (*big.Int, error) {
	if decimals < 0 || decimals > MaxDecimals {
		return nil, fmt.Errorf("%w: decimals %d out of range 0..%d", ErrAmount, decimals, MaxDecimals)
	}
	if human == "" || len(human) > maxAmountChars {
		return nil, fmt.Errorf("%w: empty or longer than %d characters", ErrAmount, maxAmountChars)
	}
	whole, frac, hasDot := strings.Cut(human, ".")
	if !digitsOnly(whole) || (hasDot && !digitsOnly(frac)) {
		return nil, fmt.Errorf("%w: %q is not a non-negative decimal number", ErrAmount, human)
	}
	frac = strings.TrimRight(frac, "0")
	if len(frac) > decimals {
		return nil, fmt.Errorf("%w: %q has more than %d decimals", ErrAmount, human, decimals)
	}
	n, ok := new(big.Int).SetString(whole+frac+strings.Repeat("0", decimals-len(frac)), 10)
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrAmount, human)
	}
	if n.BitLen() > 256 {
		return nil, fmt.Errorf("%w: %q does not fit in uint256", ErrAmount, human)
	}
	return n, nil
}

// digitsOnly reports whether s is one or more ASCII digits.
func digitsOnly(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// FormatAmount renders base units as a human amount with the given decimals, without
// trailing zeros: 10000 with 6 decimals is "0.01", 1000000 is "1". A nil amount is "0";
// decimals outside 0..MaxDecimals are treated as 0.
func FormatAmount(base *big.Int, decimals int) string {
	if base == nil {
		return "0"
	}
	if decimals <= 0 || decimals > MaxDecimals {
		return base.String()
	}
	sign := ""
	abs := new(big.Int).Set(base)
	if abs.Sign() < 0 {
		sign = "-"
		abs.Neg(abs)
	}
	s := abs.String()
	if len(s) <= decimals {
		s = strings.Repeat("0", decimals-len(s)+1) + s
	}
	whole, frac := s[:len(s)-decimals], strings.TrimRight(s[len(s)-decimals:], "0")
	if frac == "" {
		return sign + whole
	}
	return sign + whole + "." + frac
}
