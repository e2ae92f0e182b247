package verdictserver

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ethereum/go-ethereum/crypto"
)

// requestHash binds a request to its agent, its canonical content and a fresh server
// nonce (docs/verdict-api.md#requesthash):
//
//	"0x" + hex(keccak256(canonicalJSON({agentId, chainId, escrowAddress, prompt, proposedTx}) || nonce))
//
// escrowAddress is lower-case hex; nonce is 32 random bytes that are not kept, so two
// identical submits get two hashes and no hash can be guessed from a request.
func requestHash(agentID string, r *submitRequest) (string, error) {
	var nonce [32]byte
	_, _ = rand.Read(nonce[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hashWithNonce(agentID, r, nonce)
}

func hashWithNonce(agentID string, r *submitRequest, nonce [32]byte) (string, error) {
	c, err := canonicalJSON(map[string]any{
		"agentId":       agentID,
		"chainId":       json.Number(strconv.FormatInt(r.ChainID, 10)),
		"escrowAddress": strings.ToLower(r.Escrow.Hex()),
		"prompt":        r.Prompt,
		"proposedTx":    r.ProposedTx,
	})
	if err != nil {
		return "", err
	}
	return "0x" + hex.EncodeToString(crypto.Keccak256(c, nonce[:])), nil
}

// maxDescriptionRunes caps a description (docs/verdict-api.md#transaction-record).
const maxDescriptionRunes = 200

// describe derives a record's description from its prompt: trimmed, every run of white
// space one space, at most 200 characters, the last one an ellipsis when cut.
func describe(prompt string) string {
	d := strings.Join(strings.Fields(prompt), " ")
	if utf8.RuneCountInString(d) <= maxDescriptionRunes {
		return d
	}
	r := []rune(d)[:maxDescriptionRunes-1]
	return strings.TrimRight(string(r), " ") + "…"
}
