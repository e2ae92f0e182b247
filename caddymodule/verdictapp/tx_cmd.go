package verdictapp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/spf13/cobra"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictclient"
	"github.com/x402gate/x402gate/verdictserver"
	"github.com/x402gate/x402gate/verdictserver/store"
)

// The `caddy verdict tx` subcommands close the operator's loop (docs/caddy.md#operator-commands):
// submit an action as an agent and wait for its verdict, then read verdicts back from the
// store with their reasons.

// txCommand builds `caddy verdict tx`.
func txCommand() *cobra.Command {
	tx := &cobra.Command{Use: "tx", Short: "Submit actions as an agent; list and show verdicts"}

	list := storeCmd("list", "Lists an agent's transactions and verdicts, newest first", 0, func(c *cobra.Command, op *verdictserver.Operator, st *store.Store, _ []string) error {
		id, err := agentFlag(c, st)
		if err != nil {
			return err
		}
		limit, _ := c.Flags().GetInt("limit")
		txs, err := op.Transactions(c.Context(), id, store.Cursor{}, limit)
		if err != nil {
			return err
		}
		for _, t := range txs {
			outcome, code, reason := verdictSummary(t)
			fmt.Fprintf(c.OutOrStdout(), "%s\t%s\t%s\t%s\t%s\n", t.CreatedAt.UTC().Format(time.RFC3339), t.RequestHash, outcome, code, reason)
		}
		return nil
	})
	list.Flags().String("agent", "", "the agent's id or name")
	list.Flags().Int("limit", 20, fmt.Sprintf("how many, newest first (1 to %d)", store.MaxPage))

	show := storeCmd("show <requestHash>", "Shows one transaction: what was proposed, its verdict and each check", 1, func(c *cobra.Command, op *verdictserver.Operator, _ *store.Store, args []string) error {
		t, err := op.Transaction(c.Context(), args[0])
		if err != nil {
			return err
		}
		return printTransaction(c.OutOrStdout(), t)
	})

	submit := &cobra.Command{
		Use:          "submit",
		Short:        "Submits an action with an agent's key and waits for its verdict",
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE:         runSubmit,
	}
	f := submit.Flags()
	f.String("url", "", "the verdict API's base URL, e.g. http://127.0.0.1:8083 (required)")
	f.String("key-file", "", "a file holding the agent's API key (default: $X402_VERDICT_KEY_FILE; or set X402_VERDICT_KEY)")
	f.String("escrow", "", "the agent's wallet that acts (required)")
	f.Int64("chain", 0, "the chain id (required unless --file gives it)")
	f.String("prompt", "", "what initiated the action, in words (default: derived from the action)")
	f.String("erc20-transfer", "", "an ERC-20 transfer of this token contract: with --to and --amount")
	f.String("payment", "", "an x402 payment in this token contract: with --to, --amount and optionally --resource")
	f.String("to", "", "the recipient (transfer, payment) or the called contract (raw call)")
	f.String("amount", "", "the amount in the token's base units")
	f.String("resource", "", "the paid resource's URL (payment)")
	f.String("data", "", "a raw call's 0x call data (with --to; protocol --protocol)")
	f.String("value", "0", "a raw call's value in wei")
	f.String("protocol", "evm", "a raw call's protocol (evm, uniswap)")
	f.String("file", "", "a file holding the proposedTx JSON object instead")
	f.Duration("wait", 30*time.Second, "how long to wait for the verdict")

	tx.AddCommand(submit, list, show)
	return tx
}

// verdictSummary is the outcome, reason code and human reason of t's verdict, or PENDING.
func verdictSummary(t store.Transaction) (outcome, code, reason string) {
	if t.Verdict == nil {
		return "pending", "-", "no verdict yet"
	}
	var v verdict.Verdict
	if err := json.Unmarshal(t.Verdict, &v); err != nil {
		return strings.ToLower(t.Status), "-", "the stored verdict cannot be read"
	}
	return string(v.Outcome), string(v.ReasonCode), v.HumanReason
}

// printTransaction writes one transaction for a person: the record, the action and the
// verdict with every check that did not pass.
func printTransaction(w io.Writer, t store.Transaction) error {
	fmt.Fprintf(w, "requestHash   %s\nstatus        %s\nchain         %d\nescrow        %s\ncreated       %s\n",
		t.RequestHash, t.Status, t.ChainID, t.Escrow.Hex(), t.CreatedAt.UTC().Format(time.RFC3339))
	if t.PolicyVersion != nil {
		fmt.Fprintf(w, "policyVersion %d\n", *t.PolicyVersion)
	}
	fmt.Fprintf(w, "prompt        %s\nproposedTx    %s\n", t.Prompt, t.ProposedTx)
	if t.Verdict == nil {
		fmt.Fprintln(w, "verdict       pending")
		return nil
	}
	var v verdict.Verdict
	if err := json.Unmarshal(t.Verdict, &v); err != nil {
		return fmt.Errorf("the stored verdict of %s cannot be read: %w", t.RequestHash, err)
	}
	printVerdict(w, &v)
	return nil
}

// printVerdict writes a verdict's outcome, reason and the checks that did not pass.
func printVerdict(w io.Writer, v *verdict.Verdict) {
	fmt.Fprintf(w, "verdict       %s (%s)\nreason        %s\n", v.Outcome, v.ReasonCode, v.HumanReason)
	for _, c := range v.Checks {
		if c.Status == verdict.CheckPassed {
			continue
		}
		fmt.Fprintf(w, "  %-12s %-26s %s\n", c.Status, c.CheckID, c.HumanReason)
	}
}

// runSubmit is `caddy verdict tx submit`.
func runSubmit(c *cobra.Command, _ []string) error {
	f := c.Flags()
	base, _ := f.GetString("url")
	escrow, _ := f.GetString("escrow")
	if base == "" || escrow == "" {
		return errors.New("--url and --escrow are required")
	}
	if !common.IsHexAddress(escrow) {
		return fmt.Errorf("--escrow %q is not an address", escrow)
	}
	key, err := agentKey(f.Lookup("key-file").Value.String())
	if err != nil {
		return err
	}
	action, err := proposedAction(c)
	if err != nil {
		return err
	}
	prompt, _ := f.GetString("prompt")
	if prompt == "" {
		prompt = "submitted with caddy verdict tx submit: " + action.summary
	}
	client, err := verdictclient.New(verdictclient.Config{BaseURL: base, APIKey: key})
	if err != nil {
		return err
	}
	wait, _ := f.GetDuration("wait")
	ctx, cancel := context.WithTimeout(c.Context(), wait)
	defer cancel()
	rec, err := client.Submit(ctx, verdictclient.SubmitRequest{EscrowAddress: common.HexToAddress(escrow).Hex(), Prompt: prompt, ProposedTx: action.tx})
	if err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	fmt.Fprintf(c.OutOrStdout(), "requestHash   %s\n", rec.RequestHash)
	v, err := client.Await(ctx, rec.RequestHash, verdictclient.PollOptions{IntervalMs: 200})
	if err != nil {
		return fmt.Errorf("waiting for the verdict of %s: %w", rec.RequestHash, err)
	}
	printVerdict(c.OutOrStdout(), v)
	return nil
}

// agentKey reads the agent's API key: from file, else $X402_VERDICT_KEY_FILE's file, else
// $X402_VERDICT_KEY. A key is never a flag's value, which process listings show.
func agentKey(file string) (string, error) {
	if file == "" {
		file = os.Getenv("X402_VERDICT_KEY_FILE")
	}
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("the agent key file: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	if k := os.Getenv("X402_VERDICT_KEY"); k != "" {
		return k, nil
	}
	return "", errors.New("no agent key: give --key-file, or set X402_VERDICT_KEY_FILE or X402_VERDICT_KEY")
}

// proposed is an action to submit and a few words about it.
type proposed struct {
	tx      any
	summary string
}

// erc20Transfer is the ABI of ERC-20's transfer, to encode its call data.
var erc20Transfer = func() abi.Method {
	addr, _ := abi.NewType("address", "", nil)
	u256, _ := abi.NewType("uint256", "", nil)
	return abi.NewMethod("transfer", "transfer", abi.Function, "nonpayable", false, false,
		abi.Arguments{{Name: "to", Type: addr}, {Name: "amount", Type: u256}}, abi.Arguments{{Type: abi.Type{T: abi.BoolTy}}})
}()

// proposedAction builds the proposedTx from the flags: exactly one of --erc20-transfer,
// --payment, --data (a raw call) and --file.
func proposedAction(c *cobra.Command) (proposed, error) {
	f := c.Flags()
	get := func(name string) string { v, _ := f.GetString(name); return v }
	chain, _ := f.GetInt64("chain")
	kinds := 0
	for _, k := range []string{"erc20-transfer", "payment", "data", "file"} {
		if get(k) != "" {
			kinds++
		}
	}
	if kinds != 1 {
		return proposed{}, errors.New("give exactly one of --erc20-transfer, --payment, --data and --file")
	}
	if get("file") != "" {
		b, err := os.ReadFile(get("file"))
		if err != nil {
			return proposed{}, err
		}
		var obj map[string]any
		if err := json.Unmarshal(b, &obj); err != nil {
			return proposed{}, fmt.Errorf("--file: not a JSON object: %w", err)
		}
		return proposed{tx: json.RawMessage(b), summary: fmt.Sprintf("the %v action of %s", obj["protocol"], get("file"))}, nil
	}
	if chain <= 0 {
		return proposed{}, errors.New("--chain is required: a positive chain id")
	}
	to := get("to")
	if !common.IsHexAddress(to) {
		return proposed{}, fmt.Errorf("--to %q is not an address", to)
	}
	amount, ok := new(big.Int).SetString(get("amount"), 10)
	if t := get("erc20-transfer") + get("payment"); t != "" {
		if !ok || amount.Sign() < 0 {
			return proposed{}, fmt.Errorf("--amount %q is not a whole number of base units", get("amount"))
		}
		if !common.IsHexAddress(t) {
			return proposed{}, fmt.Errorf("the token %q is not an address", t)
		}
	}
	switch {
	case get("erc20-transfer") != "":
		args, err := erc20Transfer.Inputs.Pack(common.HexToAddress(to), amount)
		if err != nil {
			return proposed{}, err
		}
		data := append(append([]byte{}, erc20Transfer.ID...), args...)
		token := common.HexToAddress(get("erc20-transfer")).Hex()
		return proposed{
			tx:      map[string]any{"protocol": "evm", "chainId": chain, "to": token, "data": hexutil.Encode(data), "value": "0"},
			summary: fmt.Sprintf("transfer %s base units of token %s to %s", amount, token, common.HexToAddress(to).Hex()),
		}, nil
	case get("payment") != "":
		a := verdict.PaymentAction{Protocol: verdict.ProtocolPayment, Rail: verdict.RailX402, ChainID: chain,
			PayTo: common.HexToAddress(to).Hex(), Asset: common.HexToAddress(get("payment")).Hex(), Amount: amount.String(), Resource: get("resource")}
		return proposed{tx: a, summary: fmt.Sprintf("pay %s base units of token %s to %s", a.Amount, a.Asset, a.PayTo)}, nil
	}
	if _, err := hexutil.Decode(get("data")); err != nil {
		return proposed{}, fmt.Errorf("--data: %w", err)
	}
	if v, ok := new(big.Int).SetString(get("value"), 10); !ok || v.Sign() < 0 {
		return proposed{}, fmt.Errorf("--value %q is not a whole number of wei", get("value"))
	}
	return proposed{
		tx:      map[string]any{"protocol": get("protocol"), "chainId": chain, "to": common.HexToAddress(to).Hex(), "data": get("data"), "value": get("value")},
		summary: fmt.Sprintf("a %s call to %s", get("protocol"), common.HexToAddress(to).Hex()),
	}, nil
}
