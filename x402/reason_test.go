package x402

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

// allReasons lists every Reason constant of reason.go.
var allReasons = []Reason{
	ReasonInvalidVersion, ReasonInvalidPayload, ReasonInvalidRequirements, ReasonInvalidScheme,
	ReasonInvalidNetwork, ReasonNetworkMismatch, ReasonAssetMismatch, ReasonAmountBelowMinimum,
	ReasonMissingEIP712Domain, ReasonInvalidSignature, ReasonUndeployedWallet, ReasonFactoryNotAllowed,
	ReasonRecipientMismatch, ReasonValidBefore, ReasonValidAfter, ReasonValueMismatch,
	ReasonInsufficientFunds, ReasonNonceUsed, ReasonVerdictNotApproved, ReasonApprovalNotFound,
	ReasonApprovalStoreDown, ReasonChainUnavailable, ReasonDuplicateSettlement, ReasonTransactionFailed,
	ReasonTransferEventMismatch, ReasonSettlementPending, ReasonUnexpectedVerify, ReasonUnexpectedSettle,
	ReasonUnsupportedPayloadType, ReasonPermit2InvalidSpender, ReasonPermit2RecipientMismatch,
	ReasonPermit2TokenMismatch, ReasonPermit2AmountMismatch, ReasonPermit2DeadlineExpired,
	ReasonPermit2NotYetValid, ReasonPermit2InvalidSignature, ReasonPermit2InvalidNonce,
	ReasonPermit2InsufficientBalance, ReasonPermit2AllowanceRequired, ReasonUptoFacilitatorMismatch,
	ReasonUptoSettlementExceedsAmount,
}

func TestEveryReasonHasAV1EnumValue(t *testing.T) {
	if len(allReasons) != len(reasonV1) {
		t.Fatalf("%d reasons listed, %d mapped: update allReasons", len(allReasons), len(reasonV1))
	}
	for _, r := range allReasons {
		t.Run(string(r), func(t *testing.T) {
			if _, ok := reasonV1[r]; !ok {
				t.Fatal("no explicit v1 mapping")
			}
			if !slices.Contains(V1Reasons, r.V1()) {
				t.Fatalf("V1() = %q is not in the x402@1.2.0 enum", r.V1())
			}
			if r.V2() != string(r) || r.For(2) != string(r) || r.For(1) != r.V1() {
				t.Fatal("V2/For disagree")
			}
		})
	}
	if Reason("no_such_reason").V1() != "invalid_payment" {
		t.Fatal("unknown reason must map to invalid_payment")
	}
}

func TestReasonFromWire(t *testing.T) {
	for _, tc := range []struct{ wire, want string }{
		{"invalid_exact_evm_signature", "invalid_exact_evm_signature"},
		{"invalid_exact_evm_payload_signature", "invalid_exact_evm_signature"},
		{"unsupported_scheme", "invalid_exact_evm_scheme"},
		{"insufficient_funds", "invalid_exact_evm_insufficient_balance"},
		{"something_else", "something_else"},
	} {
		t.Run(tc.wire, func(t *testing.T) {
			if got := ReasonFromWire(tc.wire); string(got) != tc.want {
				t.Fatalf("got %s", got)
			}
		})
	}
}

func TestReasonOf(t *testing.T) {
	de := &DecodeError{Reason: ReasonInvalidNetwork, Field: "network", Msg: "x"}
	for _, tc := range []struct {
		name string
		err  error
		want Reason
	}{
		{"nil", nil, ""},
		{"decode error", de, ReasonInvalidNetwork},
		{"wrapped decode error", fmt.Errorf("verify: %w", de), ReasonInvalidNetwork},
		{"mismatch", &MismatchError{Reason: ReasonValueMismatch}, ReasonValueMismatch},
		{"plain error fails closed", errors.New("x"), ReasonInvalidPayload},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ReasonOf(tc.err); got != tc.want {
				t.Fatalf("got %q", got)
			}
		})
	}
	var target *DecodeError
	if !errors.As(fmt.Errorf("w: %w", de), &target) || target.Field != "network" {
		t.Fatal("errors.As does not find the DecodeError")
	}
}
