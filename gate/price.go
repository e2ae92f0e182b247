package gate

import (
	"github.com/x402gate/x402gate/x402"

	"errors"
	"fmt"
	"math/big"
	"strings"
)

// ErrInvalidPrice is wrapped by every error of ParsePrice.
var ErrInvalidPrice = errors.New("invalid price")

// maxPriceDigits bounds the digits of a price, the length of the largest uint256.
const maxPriceDigits = 78

// ParsePrice reads a price in one of these forms and returns it in the asset's base units:
//
//	0.01          human units: scaled by 10^decimals ("0.01" with 6 decimals is 10000)
//	0.01 USDC     human units with the asset's symbol (case-insensitive; it must match symbol)
//	$0.01         human units of a dollar-pegged asset (x402-express writes prices so)
//	10000 base    base units, taken as they are
//
// A human price may not have more fractional digits than decimals allows, and every price
// must be positive: a gate that charges nothing is a misconfiguration, not a free route.
// Errors wrap ErrInvalidPrice and quote the price, which is not a secret.
func ParsePrice(s string, decimals int, symbol string) (*big.Int, error) {
	n, err := parseQuantity(s, decimals, symbol)
	if err != nil {
		return nil, err
	}
	if n.Sign() <= 0 {
		return nil, fmt.Errorf("price %q: must be positive: %w", s, ErrInvalidPrice)
	}
	return n, nil
}

// parseQuantity reads an amount in ParsePrice's grammar, zero included.
func parseQuantity(s string, decimals int, symbol string) (*big.Int, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 || len(fields) > 2 {
		return nil, fmt.Errorf("price %q: want \"<amount>\", \"<amount> <symbol>\" or \"<integer> base\": %w", s, ErrInvalidPrice)
	}
	num := fields[0]
	base := false
	if len(fields) == 2 {
		unit := fields[1]
		switch {
		case strings.EqualFold(unit, "base"):
			base = true
		case symbol != "" && strings.EqualFold(unit, symbol):
		default:
			want := "base"
			if symbol != "" {
				want = symbol + " or base"
			}
			return nil, fmt.Errorf("price %q: unit %q is not %s: %w", s, unit, want, ErrInvalidPrice)
		}
	}
	if strings.HasPrefix(num, "$") {
		if base {
			return nil, fmt.Errorf("price %q: a $ amount is in human units, not base units: %w", s, ErrInvalidPrice)
		}
		num = num[1:]
	}
	var n *big.Int
	var err error
	if base {
		n, err = parseBaseUnits(num)
	} else {
		n, err = parseHumanUnits(num, decimals)
	}
	if err != nil {
		return nil, fmt.Errorf("price %q: %v: %w", s, err, ErrInvalidPrice)
	}
	if n.BitLen() > 256 {
		return nil, fmt.Errorf("price %q: does not fit in uint256: %w", s, ErrInvalidPrice)
	}
	return n, nil
}

func parseBaseUnits(s string) (*big.Int, error) {
	if strings.Contains(s, ".") || len(s) > maxPriceDigits {
		return nil, errors.New("base units must be a decimal integer")
	}
	if len(s) > 1 && s[0] == '0' {
		return nil, errors.New("base units must not have leading zeros")
	}
	n, err := x402.ParseAmount(s, 0) // digits only, at most uint256
	if err != nil {
		return nil, fmt.Errorf("base units must be a decimal integer that fits in uint256 (%w)", err)
	}
	return n, nil
}

// parseHumanUnits reads a human amount ("0.01") in base units of an asset with decimals,
// refusing more fractional digits than the asset has (x402.ParseAmount's grammar).
func parseHumanUnits(s string, decimals int) (*big.Int, error) {
	if len(s) > maxPriceDigits+1 {
		return nil, errors.New("amount has too many digits")
	}
	return x402.ParseAmount(s, decimals)
}

// FormatAmount renders base units in human units, without trailing zeros: 10000 with 6
// decimals is "0.01", 1000000 is "1". It is x402.FormatAmount.
func FormatAmount(n *big.Int, decimals int) string {
	return x402.FormatAmount(n, decimals)
}
