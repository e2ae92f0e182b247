package facilitator

import (
	"crypto/ecdsa"
	"fmt"
	"math/big"
	"strings"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
)

// DefaultMinGasBalance is the gas balance under which a signer lane leaves the pool:
// 0.001 ETH, 10^15 wei (docs/facilitator.md#signer-pool).
var DefaultMinGasBalance = big.NewInt(1e15)

// keys are the pool's signer keys, the primary (Signer) first.
func (c *Config) keys() []*ecdsa.PrivateKey {
	return append([]*ecdsa.PrivateKey{c.Signer}, c.Signers...)
}

// validatePool checks the signer pool's options: each key of SignerKeys (a placeholder is
// only checked for being set), MinGasBalance and MaxPendingPerSigner.
func (c *Config) validatePool() error {
	for _, k := range c.SignerKeys {
		switch k = strings.TrimSpace(k); {
		case k == "":
			return configErr("", "signer_key", "an empty key in the pool")
		case !strings.Contains(k, "{"):
			if _, err := parseSignerKey(k); err != nil {
				return err
			}
		}
	}
	if _, err := c.minGasBalance(); err != nil {
		return err
	}
	if c.MaxPendingPerSigner < 0 {
		return configErr("", "max_pending_per_signer", "%d is not a positive number", c.MaxPendingPerSigner)
	}
	if c.BalanceCheckInterval < 0 {
		return configErr("", "balance_check_interval", "must not be negative")
	}
	return nil
}

// minGasBalance is MinGasBalance as wei, or its default.
func (c *Config) minGasBalance() (*big.Int, error) {
	if c.MinGasBalance == "" {
		return new(big.Int).Set(DefaultMinGasBalance), nil
	}
	m, ok := new(big.Int).SetString(c.MinGasBalance, 10)
	if !ok || m.Sign() < 0 {
		return nil, configErr("", "min_gas_balance", "%q is not a non-negative integer of wei", c.MinGasBalance)
	}
	return m, nil
}

// checkDistinctKeys refuses a pool that names one key twice: two lanes of one account
// would race for its nonces.
func (c *Config) checkDistinctKeys() error {
	seen := map[common.Address]bool{}
	for _, k := range c.keys() {
		a := crypto.PubkeyToAddress(k.PublicKey)
		if seen[a] {
			return fmt.Errorf("facilitator config: %w", configErr("", "signer_key", "the pool names the signer %s twice", a.Hex()))
		}
		seen[a] = true
	}
	return nil
}

// parseSignerKey parses a hex private key, with or without 0x. Its error never quotes it.
func parseSignerKey(k string) (*ecdsa.PrivateKey, error) {
	key, err := crypto.HexToECDSA(strings.TrimPrefix(strings.TrimSpace(k), "0x"))
	if err != nil {
		return nil, configErr("", "signer_key", "is not a hex secp256k1 private key")
	}
	return key, nil
}
