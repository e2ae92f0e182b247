package pass

import "testing"

// TestSIWXMessageFormat pins the EIP-4361 message against one written out by hand from
// the grammar @signinwithethereum/siwe 4 follows: no statement leaves two blank lines,
// optional fields in order, resources as a list.
func TestSIWXMessageFormat(t *testing.T) {
	addr, _ := proofAddress("0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaed")
	exp, rid := "2026-01-01T00:05:00.000Z", "r1"
	p := &Proof{
		Domain: "shop.example:8080", URI: "http://shop.example:8080/premium/a", Version: "1", Nonce: "0123456789abcdef",
		IssuedAt: "2026-01-01T00:00:00.000Z", ExpirationTime: &exp, RequestID: &rid, Resources: []string{"http://shop.example:8080/premium/a"},
	}
	want := "shop.example:8080 wants you to sign in with your Ethereum account:\n" +
		"0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed\n\n\n" +
		"URI: http://shop.example:8080/premium/a\nVersion: 1\nChain ID: 84532\nNonce: 0123456789abcdef\n" +
		"Issued At: 2026-01-01T00:00:00.000Z\nExpiration Time: 2026-01-01T00:05:00.000Z\nRequest ID: r1\n" +
		"Resources:\n- http://shop.example:8080/premium/a"
	if got := p.Message(addr.Hex(), 84532); got != want {
		t.Errorf("message\n%q\nwant\n%q", got, want)
	}
	st := "Sign in"
	p.Statement, p.RequestID, p.Resources, p.ExpirationTime = &st, nil, nil, nil
	want = "shop.example:8080 wants you to sign in with your Ethereum account:\n" +
		"0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed\n\nSign in\n\n" +
		"URI: http://shop.example:8080/premium/a\nVersion: 1\nChain ID: 84532\nNonce: 0123456789abcdef\n" +
		"Issued At: 2026-01-01T00:00:00.000Z"
	if got := p.Message(addr.Hex(), 84532); got != want {
		t.Errorf("message\n%q\nwant\n%q", got, want)
	}
	if _, ok := proofAddress("0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAeD"); ok {
		t.Error("a mixed-case address with a wrong checksum was accepted")
	}
}
