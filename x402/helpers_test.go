package x402

import (
	"encoding/base64"
	"errors"
	"math/big"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/x402gate/x402gate/internal/testenv"
)

// anvilKey is anvil's first well-known development key (public; never holds real funds).
const anvilKey = "ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80"

var anvilAddr = common.HexToAddress("0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266")

var payTo = common.HexToAddress("0x209693Bc6afc0C5328bA36FaF03C514EF312287C")

// testAuthorization is a fixed authorization from anvil's first account.
func testAuthorization() Authorization {
	var nonce [32]byte
	copy(nonce[:], common.FromHex("0xf3746613c2d920b5fdabc0856f2aeb2d4f88ee6037b8cc5d04a71a4462f13480"))
	return Authorization{
		From: anvilAddr, To: payTo, Value: big.NewInt(10000),
		ValidAfter: big.NewInt(1740672089), ValidBefore: big.NewInt(1740672154), Nonce: nonce,
	}
}

// signTest signs a on Base Sepolia USDC with the anvil key, v in 27/28 like viem.
func signTest(t testing.TB, a Authorization) []byte {
	t.Helper()
	h, err := TransferWithAuthorizationHash(BaseSepolia.ChainID, BaseSepolia.USDC.Address, BaseSepolia.USDC.Name, BaseSepolia.USDC.Version, a)
	if err != nil {
		t.Fatal(err)
	}
	key, err := crypto.HexToECDSA(anvilKey)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := crypto.Sign(h[:], key)
	if err != nil {
		t.Fatal(err)
	}
	sig[64] += 27
	return sig
}

func authJSONMap(a Authorization) map[string]any {
	j := a.JSON()
	return map[string]any{"from": j.From, "to": j.To, "value": j.Value, "validAfter": j.ValidAfter, "validBefore": j.ValidBefore, "nonce": j.Nonce}
}

// v1Map is a valid X-PAYMENT JSON as x402-fetch 1.2.0 builds it.
func v1Map(t testing.TB) map[string]any {
	a := testAuthorization()
	return map[string]any{
		"x402Version": 1, "scheme": "exact", "network": "base-sepolia",
		"payload": map[string]any{"signature": hexutil.Encode(signTest(t, a)), "authorization": authJSONMap(a)},
	}
}

func acceptedMap() map[string]any {
	return map[string]any{
		"scheme": "exact", "network": "eip155:84532", "amount": "10000",
		"asset": BaseSepolia.USDC.Address.Hex(), "payTo": payTo.Hex(), "maxTimeoutSeconds": 60,
		"extra": map[string]any{"name": "USDC", "version": "2"},
	}
}

// v2Map is a valid PAYMENT-SIGNATURE JSON as @x402/core 2.27 builds it.
func v2Map(t testing.TB) map[string]any {
	a := testAuthorization()
	return map[string]any{
		"x402Version": 2,
		"resource":    map[string]any{"url": "https://api.example.com/premium", "description": "d", "mimeType": "application/json"},
		"accepted":    acceptedMap(),
		"payload":     map[string]any{"signature": hexutil.Encode(signTest(t, a)), "authorization": authJSONMap(a)},
	}
}

// del marks a key for deletion in with.
type del struct{}

// with returns a deep copy of m with the value at the dotted path replaced (or removed
// for del{}).
func with(m map[string]any, path string, v any) map[string]any {
	c := deepCopy(m).(map[string]any)
	keys := strings.Split(path, ".")
	cur := c
	for _, k := range keys[:len(keys)-1] {
		cur = cur[k].(map[string]any)
	}
	if _, ok := v.(del); ok {
		delete(cur, keys[len(keys)-1])
	} else {
		cur[keys[len(keys)-1]] = v
	}
	return c
}

func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		c := make(map[string]any, len(x))
		for k, e := range x {
			c[k] = deepCopy(e)
		}
		return c
	case []any:
		c := make([]any, len(x))
		for i, e := range x {
			c[i] = deepCopy(e)
		}
		return c
	}
	return v
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	return []byte(testenv.JSON(t, v))
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// wantReason checks that err carries reason (and, when not empty, names field).
func wantReason(t *testing.T, err error, reason Reason, field string) {
	t.Helper()
	if err == nil {
		t.Fatalf("decoded; want refusal with %s", reason)
	}
	if got := ReasonOf(err); got != reason {
		t.Fatalf("reason = %s, want %s (err: %v)", got, reason, err)
	}
	var de *DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("error %T is not a *DecodeError", err)
	}
	if field != "" && de.Field != field {
		t.Fatalf("field = %q, want %q (err: %v)", de.Field, field, err)
	}
}
