package engine

import "github.com/ethereum/go-ethereum/common"

// builtinSinks are the addresses value cannot come back from (docs/policy.md#sinks).
var builtinSinks = func() map[common.Address]string {
	m := map[common.Address]string{
		{}: "the zero address",
		common.HexToAddress("0x000000000000000000000000000000000000dEaD"): "the burn address 0x…dEaD",
		common.HexToAddress("0xEeeeeEeeeEeEeeEeEeEeeEEEeeeeEeeeeeeeEEeE"): "the native-asset sentinel 0xEeee…EEeE",
		common.HexToAddress("0x0000000000000000000000000000000000000100"): "the P-256 precompile 0x…0100",
	}
	for i := 1; i <= 0x0a; i++ {
		m[common.BytesToAddress([]byte{byte(i)})] = "a precompile"
	}
	return m
}()

func builtinSink(a common.Address) (string, bool) {
	name, ok := builtinSinks[a]
	return name, ok
}
