package intern

import "github.com/ethereum/go-ethereum/common"

// Address parsing without allocation: the decoders and the checks read addresses on every
// evaluation (TestAddressParsersAgree holds these to the go-ethereum and policy readers
// they stand for).

// Unhex is the value of the hex digit c.
func Unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// hex40 decodes 40 hex digits.
func hex40(s string) (a common.Address, ok bool) {
	if len(s) != 40 {
		return a, false
	}
	for i := 0; i < 20; i++ {
		hi, ok1 := Unhex(s[2*i])
		lo, ok2 := Unhex(s[2*i+1])
		if !ok1 || !ok2 {
			return a, false
		}
		a[i] = hi<<4 | lo
	}
	return a, true
}

// LooseAddress is common.IsHexAddress(s) and common.HexToAddress(s): 40 hex digits, with or
// without 0x or 0X, in any case.
func LooseAddress(s string) (common.Address, bool) {
	if len(s) >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') {
		s = s[2:]
	}
	return hex40(s)
}

// StrictAddress is policy.Address: 0x and 40 hex digits, EIP-55 when mixed case.
func StrictAddress(s string) (common.Address, bool) {
	if len(s) != 42 || s[0] != '0' || s[1] != 'x' {
		return common.Address{}, false
	}
	a, ok := hex40(s[2:])
	if !ok {
		return common.Address{}, false
	}
	lower, upper := false, false
	for i := 2; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'f':
			lower = true
		case 'A' <= c && c <= 'F':
			upper = true
		}
	}
	if lower && upper && Checksum(a).Val != s {
		return a, false
	}
	return a, true
}
