// Command devchain prepares a local chain for the x402gate demo: it deploys our EIP-3009
// token (X402Token, EIP-712 domain "USDC"/"2", 6 decimals) to a running anvil, funds a demo
// payer, and writes the addresses and key files the demo Caddyfile reads. It also makes the
// demo's verdict store: the agent "demo" with its key, the payer's wallet and a policy that
// allows paying the demo payee only.
//
// It is run by scripts/run against anvil's well-known development accounts, whose private
// keys are public. Never point it at a chain that holds real value.
package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"github.com/ethereum/go-ethereum/accounts/abi/bind/v2"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient"

	"github.com/x402gate/x402gate/internal/contracts"
)

// anvil's default development keys (mnemonic "test test … junk"), accounts 0, 1 and 2.
const (
	facilitatorKeyHex = "ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80"
	payerKeyHex       = "59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d"
	payToKeyHex       = "5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a"
)

func main() {
	rpcURL := flag.String("rpc", "http://127.0.0.1:8545", "JSON-RPC URL of the local chain")
	outDir := flag.String("out", ".devchain", "directory for the env file and key files")
	fund := flag.String("fund", "1000000000", "token base units minted to the demo payer (1000 USDC)")
	flag.Parse()
	if err := run(*rpcURL, *outDir, *fund); err != nil {
		fmt.Fprintln(os.Stderr, "devchain:", err)
		os.Exit(1)
	}
}

func run(rpcURL, outDir, fund string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	amount, ok := new(big.Int).SetString(fund, 10)
	if !ok || amount.Sign() < 0 {
		return fmt.Errorf("-fund %q is not a non-negative integer", fund)
	}
	client, err := dial(ctx, rpcURL)
	if err != nil {
		return err
	}
	defer client.Close()
	chainID, err := client.ChainID(ctx)
	if err != nil {
		return fmt.Errorf("read chain id: %w", err)
	}
	deployer, payer, payTo := mustKey(facilitatorKeyHex), mustKey(payerKeyHex), mustKey(payToKeyHex)
	auth := bind.NewKeyedTransactor(deployer, chainID)

	ctorArgs, err := contracts.TokenABI.Pack("", "USDC", "2")
	if err != nil {
		return fmt.Errorf("pack constructor: %w", err)
	}
	token, err := deploy(ctx, client, auth, append(append([]byte{}, contracts.TokenBytecode...), ctorArgs...))
	if err != nil {
		return fmt.Errorf("deploy token: %w", err)
	}
	payerAddr := crypto.PubkeyToAddress(payer.PublicKey)
	mint, err := contracts.TokenABI.Pack("mint", payerAddr, amount)
	if err != nil {
		return fmt.Errorf("pack mint: %w", err)
	}
	if err := call(ctx, client, auth, token, mint); err != nil {
		return fmt.Errorf("mint: %w", err)
	}

	if err := os.MkdirAll(outDir, 0o700); err != nil {
		return err
	}
	abs, err := filepath.Abs(outDir)
	if err != nil {
		return err
	}
	files := map[string]string{
		"facilitator.key": "0x" + facilitatorKeyHex,
		"payer.key":       "0x" + payerKeyHex,
	}
	// The facilitator API key is random per machine and kept across runs.
	apiKeyFile := filepath.Join(abs, "facilitator-api.key")
	if _, err := os.Stat(apiKeyFile); errors.Is(err, os.ErrNotExist) {
		var b [24]byte
		if _, err := rand.Read(b[:]); err != nil {
			return fmt.Errorf("make facilitator API key: %w", err)
		}
		files["facilitator-api.key"] = hex.EncodeToString(b[:])
	}
	// So is the key that signs the demo site's access passes.
	passKeyFile := filepath.Join(abs, "pass.key")
	if _, err := os.Stat(passKeyFile); errors.Is(err, os.ErrNotExist) {
		var b [32]byte
		if _, err := rand.Read(b[:]); err != nil {
			return fmt.Errorf("make pass key: %w", err)
		}
		files["pass.key"] = hex.EncodeToString(b[:])
	}
	for name, v := range files {
		if err := os.WriteFile(filepath.Join(outDir, name), []byte(v+"\n"), 0o600); err != nil {
			return err
		}
	}
	payToAddr := crypto.PubkeyToAddress(payTo.PublicKey)
	if !chainID.IsInt64() {
		return fmt.Errorf("chain id %s does not fit the verdict store", chainID)
	}
	verdictDB, verdictKey, policyFile := verdictFiles(abs)
	said, err := setUpVerdicts(ctx, verdictDB, verdictKey, policyFile, chainID.Int64(), token, payerAddr, payToAddr)
	if err != nil {
		return fmt.Errorf("verdict store: %w", err)
	}
	env := fmt.Sprintf("X402_RPC_URL=%s\nX402_CHAIN_ID=%s\nX402_TOKEN=%s\nX402_PAY_TO=%s\nX402_TIP_TO=%s\nX402_PAYER=%s\nX402_FACILITATOR_KEY_FILE=%s\nX402_PAYER_KEY_FILE=%s\nX402_FACILITATOR_API_KEY_FILE=%s\nX402_VERDICT_DB=%s\nX402_VERDICT_KEY_FILE=%s\nX402_PASS_KEY_FILE=%s\n",
		rpcURL, chainID, token.Hex(), payToAddr.Hex(), tipToAddress.Hex(), payerAddr.Hex(),
		filepath.Join(abs, "facilitator.key"), filepath.Join(abs, "payer.key"), apiKeyFile, verdictDB, verdictKey, passKeyFile)
	if err := os.WriteFile(filepath.Join(outDir, "env"), []byte(env), 0o600); err != nil {
		return err
	}
	fmt.Printf("token %s deployed on chain %s; payer %s funded with %s base units\n", token.Hex(), chainID, payerAddr.Hex(), amount)
	fmt.Println(said)
	return nil
}

// dial waits for the chain to answer, since scripts/run starts anvil just before.
func dial(ctx context.Context, rpcURL string) (*ethclient.Client, error) {
	for {
		client, err := ethclient.DialContext(ctx, rpcURL)
		if err == nil {
			if _, err = client.ChainID(ctx); err == nil {
				return client, nil
			}
			client.Close()
		}
		select {
		case <-ctx.Done():
			return nil, errors.New("the chain did not answer in time")
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func deploy(ctx context.Context, client *ethclient.Client, auth *bind.TransactOpts, code []byte) (common.Address, error) {
	receipt, err := send(ctx, client, auth, nil, code)
	if err != nil {
		return common.Address{}, err
	}
	return receipt.ContractAddress, nil
}

func call(ctx context.Context, client *ethclient.Client, auth *bind.TransactOpts, to common.Address, data []byte) error {
	_, err := send(ctx, client, auth, &to, data)
	return err
}

func send(ctx context.Context, client *ethclient.Client, auth *bind.TransactOpts, to *common.Address, data []byte) (*types.Receipt, error) {
	from := auth.From
	nonce, err := client.PendingNonceAt(ctx, from)
	if err != nil {
		return nil, err
	}
	tip, err := client.SuggestGasTipCap(ctx)
	if err != nil {
		return nil, err
	}
	head, err := client.HeaderByNumber(ctx, nil)
	if err != nil {
		return nil, err
	}
	feeCap := new(big.Int).Add(tip, new(big.Int).Mul(head.BaseFee, big.NewInt(2)))
	tx := types.NewTx(&types.DynamicFeeTx{Nonce: nonce, GasTipCap: tip, GasFeeCap: feeCap, Gas: 5_000_000, To: to, Data: data})
	signed, err := auth.Signer(from, tx)
	if err != nil {
		return nil, err
	}
	if err := client.SendTransaction(ctx, signed); err != nil {
		return nil, err
	}
	receipt, err := bind.WaitMined(ctx, client, signed.Hash())
	if err != nil {
		return nil, err
	}
	if receipt.Status != types.ReceiptStatusSuccessful {
		return nil, fmt.Errorf("transaction %s reverted", signed.Hash().Hex())
	}
	return receipt, nil
}

func mustKey(hex string) *ecdsa.PrivateKey {
	k, err := crypto.HexToECDSA(hex)
	if err != nil {
		panic(err) // constant input
	}
	return k
}
