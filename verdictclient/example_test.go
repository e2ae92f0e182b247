package verdictclient_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictclient"
	"github.com/x402gate/x402gate/x402"
)

// The shop of the examples and the agent wallet that pays it.
var (
	shop   = common.HexToAddress("0x209693Bc6afc0C5328bA36FaF03C514EF312287C")
	wallet = common.HexToAddress("0x857b06519E91e3A54538791bDbb0E22373e36b66")
)

// payment is a 0.01 USDC payment on Base Sepolia from the agent's wallet to payTo, with the
// requirements it answers: what a facilitator has in hand at /verify.
func payment(payTo common.Address) (*x402.Payment, *x402.Requirements) {
	amount := big.NewInt(10_000)
	r := &x402.Requirements{
		Scheme: x402.SchemeExact, Network: x402.BaseSepolia.CAIP2, Amount: amount,
		Asset: x402.BaseSepolia.USDC.Address, PayTo: payTo, MaxTimeoutSeconds: 60,
		Resource: x402.ResourceInfo{URL: "https://shop.example/report"},
	}
	p := &x402.Payment{
		Version: x402.Version2, Scheme: x402.SchemeExact, Network: r.Network,
		Authorization: x402.Authorization{From: wallet, To: payTo, Value: amount,
			ValidAfter: big.NewInt(0), ValidBefore: big.NewInt(1 << 40)},
	}
	return p, r
}

// verdictService starts a stand-in for the verdict service, so that the examples run
// without a network: its one policy allows payments to the shop and rejects every other
// payee. Point BaseURL at a real verdict service instead.
func verdictService() *httptest.Server {
	var mu sync.Mutex
	verdicts := map[string]map[string]any{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /transactions", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var submit struct {
			ProposedTx verdict.PaymentAction `json:"proposedTx"`
		}
		if err := json.Unmarshal(body, &submit); err != nil {
			http.Error(w, `{"error":"invalid_body"}`, http.StatusBadRequest)
			return
		}
		sum := sha256.Sum256(body)
		hash := "0x" + hex.EncodeToString(sum[:])
		v := testenv.ApprovedVerdict()
		if !strings.EqualFold(submit.ProposedTx.PayTo, shop.Hex()) {
			v = testenv.RejectedVerdict(verdict.CheckRecipient, verdict.ReasonRecipientNotAllowed)
		}
		mu.Lock()
		verdicts[hash] = v
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"6f8a2c1e-0000-4000-8000-000000000001","requestHash":%q,"status":"PENDING","execution":0}`, hash)
	})
	mux.HandleFunc("GET /transactions/{hash}/approval-status", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		v, ok := verdicts[r.PathValue("hash")]
		mu.Unlock()
		if !ok {
			http.Error(w, `{"error":"not_found"}`, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, testenv.VerdictEnvelope(v))
	})
	return httptest.NewServer(mux)
}

// A facilitator checks an x402 payment with the payer's policy before it settles it.
func ExampleGuardian_VerifyPayment() {
	service := verdictService()
	defer service.Close()

	g, err := verdictclient.NewGuardian(verdictclient.GuardianOptions{
		BaseURL: service.URL,
		APIKey:  "vk_example_key_of_the_agent", // in production: os.Getenv("VERDICT_API_KEY")
	})
	if err != nil {
		panic(err)
	}
	for _, payTo := range []common.Address{shop, common.HexToAddress("0x000000000000000000000000000000000000dEaD")} {
		p, r := payment(payTo)
		res, err := g.VerifyPayment(context.Background(), p, r, verdictclient.PollOptions{})
		if err != nil {
			panic(err) // the payment could not be turned into an action; res is not approved either
		}
		if !res.Approved {
			// Refuse the payment: res.Status is rejected, timeout or error, and
			// res.Reason says why.
			fmt.Println(res.Status, res.Verdict.ReasonCode)
			continue
		}
		fmt.Println(res.Status)
	}
	// Output:
	// approved
	// rejected recipient_not_allowed
}

// Anything that is not an approval from the service refuses: here the service cannot be
// reached at all.
func ExampleGuardian_VerifyPayment_unreachable() {
	service := verdictService()
	service.Close()

	g, err := verdictclient.NewGuardian(verdictclient.GuardianOptions{BaseURL: service.URL, APIKey: "vk_example_key_of_the_agent"})
	if err != nil {
		panic(err)
	}
	p, r := payment(shop)
	res, _ := g.VerifyPayment(context.Background(), p, r, verdictclient.PollOptions{MaxAttempts: 2, IntervalMs: 10})
	fmt.Println(res.Approved, res.Status)
	// Output: false error
}

// WithGuardian wraps an x402 verifier: a payment the verifier finds valid stays valid
// only when the verdict approves it.
func ExampleWithGuardian() {
	service := verdictService()
	defer service.Close()

	// base stands for the facilitator's own checks (signature, balance, time window).
	base := func(_ context.Context, p *x402.Payment, _ *x402.Requirements) (x402.VerifyResponse, error) {
		return x402.VerifyResponse{IsValid: true, Payer: p.Authorization.From.Hex()}, nil
	}
	verify, err := verdictclient.WithGuardian(base, verdictclient.GuardianOptions{
		BaseURL: service.URL, APIKey: "vk_example_key_of_the_agent",
	}, verdictclient.PollOptions{})
	if err != nil {
		panic(err)
	}
	p, r := payment(common.HexToAddress("0x000000000000000000000000000000000000dEaD"))
	res, err := verify(context.Background(), p, r)
	if err != nil {
		panic(err)
	}
	fmt.Println(res.IsValid, res.InvalidReason, res.GuardianStatus)
	// Output: false verdict_not_approved rejected
}

// Any other action goes through the low-level Client: submit it once, then await its
// verdict, and run the action only when the verdict approves it.
func ExampleClient_Await() {
	service := verdictService()
	defer service.Close()

	c, err := verdictclient.New(verdictclient.Config{BaseURL: service.URL, APIKey: "vk_example_key_of_the_agent"})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	action := verdict.PaymentAction{
		Protocol: verdict.ProtocolPayment, Rail: verdict.RailX402, ChainID: 84532, PayTo: shop.Hex(),
		Asset: x402.BaseSepolia.USDC.Address.Hex(), Amount: "10000",
	}
	tx, err := c.Submit(ctx, verdictclient.SubmitRequest{
		EscrowAddress: wallet.Hex(), Prompt: "pay 0.01 USDC for the report", ProposedTx: action,
	})
	if err != nil {
		// An *UncertainSubmitError means the submit may have gone through: reconcile with
		// Client.Reconcile(ctx, traceID); never submit again blindly.
		panic(err)
	}
	v, err := c.Await(ctx, tx.RequestHash, verdictclient.PollOptions{})
	if err == nil && v.Approved() {
		fmt.Println("execute:", v.HumanReason)
	}
	// Output: execute: payment within policy
}
