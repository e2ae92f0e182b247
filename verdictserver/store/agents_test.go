package store

import (
	"context"
	"crypto/sha256"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/internal/testenv"
)

func hashOf(key string) [32]byte { return sha256.Sum256([]byte(key)) }

func addr(i int) common.Address { return common.HexToAddress(fmt.Sprintf("0x%040x", 0xA11CE000+i)) }

func ptr(v int64) *int64 { return &v }

var uuidPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

var agentCases = []storeCase{
	{"an agent reads back by id and by name, and agents list by name", func(t *testing.T, open storeOpen) {
		s, ctx := mustOpen(t, open), context.Background()
		b := mustAgent(t, s, "bravo")
		a := mustAgent(t, s, "alpha agent ü")
		if !uuidPattern.MatchString(a.ID) || a.ID == b.ID {
			t.Fatalf("ids %q, %q: want two distinct UUIDs", a.ID, b.ID)
		}
		if got, err := s.Agent(ctx, a.ID); err != nil || got != a {
			t.Fatalf("Agent = %+v, %v; want %+v", got, err, a)
		}
		if got, err := s.AgentByName(ctx, "bravo"); err != nil || got != b {
			t.Fatalf("AgentByName = %+v, %v; want %+v", got, err, b)
		}
		if got, err := s.Agents(ctx); err != nil || !reflect.DeepEqual(got, []Agent{a, b}) {
			t.Fatalf("Agents = %+v, %v; want alpha then bravo", got, err)
		}
	}},
	{"an agent name is taken once", func(t *testing.T, open storeOpen) {
		s, ctx := mustOpen(t, open), context.Background()
		mustAgent(t, s, "twice")
		_, err := s.CreateAgent(ctx, "twice")
		wantErr(t, "second agent of one name", err, ErrConflict)
		if got, err := s.Agents(ctx); err != nil || len(got) != 1 {
			t.Fatalf("Agents = %+v, %v; want one", got, err)
		}
	}},
	{"unknown agents are not found", func(t *testing.T, open storeOpen) {
		s, ctx := mustOpen(t, open), context.Background()
		_, err := s.Agent(ctx, "no-such-id")
		wantErr(t, "Agent", err, ErrNotFound)
		_, err = s.AgentByName(ctx, "nobody")
		wantErr(t, "AgentByName", err, ErrNotFound)
		if got, err := s.Agents(ctx); err != nil || len(got) != 0 {
			t.Fatalf("Agents of an empty store = %+v, %v", got, err)
		}
	}},
	{"an agent name must be printable text without surrounding space", func(t *testing.T, open storeOpen) {
		s, ctx := mustOpen(t, open), context.Background()
		for _, name := range []string{"", " padded", "padded ", "tab\there", "nul\x00", "bad\xffutf8", strings.Repeat("n", 129)} {
			_, err := s.CreateAgent(ctx, name)
			wantErr(t, fmt.Sprintf("CreateAgent(%q)", name), err, ErrInvalid)
		}
		if got, _ := s.Agents(ctx); len(got) != 0 {
			t.Fatalf("refused agents were written: %+v", got)
		}
	}},
}

var keyCases = []storeCase{
	{"a key is found by its hash with its agent and scopes, until revoked", func(t *testing.T, open storeOpen) {
		s, ctx := mustOpen(t, open), context.Background()
		a := mustAgent(t, s, "keyed")
		scopes := []string{"verdicts:create:own", "verdicts:read:own"}
		k, err := s.CreateKey(ctx, a.ID, "k_abcdefghijkl", hashOf("secret-1"), scopes)
		if err != nil {
			t.Fatal(err)
		}
		want := Key{ID: "k_abcdefghijkl", AgentID: a.ID, Scopes: scopes, CreatedAt: k.CreatedAt}
		if !reflect.DeepEqual(k, want) {
			t.Fatalf("CreateKey = %+v, want %+v", k, want)
		}
		if got, err := s.KeyByHash(ctx, hashOf("secret-1")); err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("KeyByHash = %+v, %v; want %+v", got, err, want)
		}
		_, err = s.KeyByHash(ctx, hashOf("secret-2"))
		wantErr(t, "KeyByHash of another secret", err, ErrNotFound)

		if err := s.RevokeKey(ctx, k.ID); err != nil {
			t.Fatal(err)
		}
		_, err = s.KeyByHash(ctx, hashOf("secret-1"))
		wantErr(t, "KeyByHash of a revoked key", err, ErrNotFound)
		got, err := s.Key(ctx, k.ID)
		if err != nil || got.RevokedAt == nil || got.RevokedAt.Before(got.CreatedAt) {
			t.Fatalf("Key after revoke = %+v, %v; want RevokedAt set", got, err)
		}
		first := *got.RevokedAt
		wantErr(t, "revoking again", s.RevokeKey(ctx, k.ID), nil)
		if again, _ := s.Key(ctx, k.ID); again.RevokedAt == nil || !again.RevokedAt.Equal(first) {
			t.Fatalf("a second revoke moved RevokedAt: %v, want %v", again.RevokedAt, first)
		}
		wantErr(t, "revoking an unknown key", s.RevokeKey(ctx, "k_nope"), ErrNotFound)
		_, err = s.Key(ctx, "k_nope")
		wantErr(t, "Key of an unknown id", err, ErrNotFound)
	}},
	{"keys list per agent, revoked ones too, oldest first", func(t *testing.T, open storeOpen) {
		s, ctx := mustOpen(t, open), context.Background()
		a, b := mustAgent(t, s, "a"), mustAgent(t, s, "b")
		var ids []string
		for i := 0; i < 3; i++ {
			k, err := s.CreateKey(ctx, a.ID, fmt.Sprintf("k_a%d", i), hashOf(fmt.Sprintf("a-%d", i)), []string{"verdicts:read:own"})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, k.ID)
		}
		if _, err := s.CreateKey(ctx, b.ID, "k_b0", hashOf("b-0"), []string{"admin"}); err != nil {
			t.Fatal(err)
		}
		if err := s.RevokeKey(ctx, "k_a1"); err != nil {
			t.Fatal(err)
		}
		keys, err := s.Keys(ctx, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, k := range keys {
			got = append(got, k.ID)
			if (k.RevokedAt != nil) != (k.ID == "k_a1") {
				t.Errorf("key %s revoked = %v", k.ID, k.RevokedAt)
			}
		}
		if !reflect.DeepEqual(got, ids) {
			t.Fatalf("Keys = %v, want %v", got, ids)
		}
		if keys, err := s.Keys(ctx, "no-such-agent"); err != nil || len(keys) != 0 {
			t.Fatalf("Keys of an unknown agent = %+v, %v", keys, err)
		}
	}},
	{"a key id and a key hash are each taken once, and a key needs a known agent", func(t *testing.T, open storeOpen) {
		s, ctx := mustOpen(t, open), context.Background()
		a, b := mustAgent(t, s, "a"), mustAgent(t, s, "b")
		scopes := []string{"verdicts:create:own"}
		if _, err := s.CreateKey(ctx, a.ID, "k_one", hashOf("one"), scopes); err != nil {
			t.Fatal(err)
		}
		cases := []struct {
			name  string
			agent string
			id    string
			hash  [32]byte
			want  error
		}{
			{"the same id with another hash", a.ID, "k_one", hashOf("two"), ErrConflict},
			{"the same hash under another id and agent", b.ID, "k_two", hashOf("one"), ErrConflict},
			{"an unknown agent", "no-such-agent", "k_three", hashOf("three"), ErrNotFound},
		}
		for _, tc := range cases {
			_, err := s.CreateKey(ctx, tc.agent, tc.id, tc.hash, scopes)
			wantErr(t, tc.name, err, tc.want)
			if strings.Contains(err.Error(), fmt.Sprintf("%x", tc.hash)) {
				t.Fatalf("%s: error carries the hash: %v", tc.name, err)
			}
		}
		if k, err := s.KeyByHash(ctx, hashOf("one")); err != nil || k.AgentID != a.ID || k.ID != "k_one" {
			t.Fatalf("the first key changed: %+v, %v", k, err)
		}
		if keys, _ := s.Keys(ctx, b.ID); len(keys) != 0 {
			t.Fatalf("refused keys were written: %+v", keys)
		}
	}},
	{"a key needs an id, a hash and well-formed scopes", func(t *testing.T, open storeOpen) {
		s, ctx := mustOpen(t, open), context.Background()
		a := mustAgent(t, s, "a")
		cases := []struct {
			name   string
			id     string
			hash   [32]byte
			scopes []string
		}{
			{"an empty id", "", hashOf("x"), []string{"admin"}},
			{"an id with a space", "k one", hashOf("x"), []string{"admin"}},
			{"a zero hash", "k_zero", [32]byte{}, []string{"admin"}},
			{"no scope", "k_none", hashOf("x"), nil},
			{"an empty scope", "k_empty", hashOf("x"), []string{"admin", ""}},
			{"a scope with a space", "k_space", hashOf("x"), []string{"verdicts read"}},
		}
		for _, tc := range cases {
			_, err := s.CreateKey(ctx, a.ID, tc.id, tc.hash, tc.scopes)
			wantErr(t, tc.name, err, ErrInvalid)
		}
		if keys, _ := s.Keys(ctx, a.ID); len(keys) != 0 {
			t.Fatalf("refused keys were written: %+v", keys)
		}
	}},
	{"a key hash is stored as 32 bytes, not the key", func(t *testing.T, open storeOpen) {
		s, ctx := mustOpen(t, open), context.Background()
		a := mustAgent(t, s, "a")
		h := hashOf("stored-secret")
		if _, err := s.CreateKey(ctx, a.ID, "k_stored", h, []string{"admin"}); err != nil {
			t.Fatal(err)
		}
		var stored []byte
		if err := s.db.QueryRowContext(ctx, `SELECT hash FROM api_keys WHERE id = $1`, "k_stored").Scan(&stored); err != nil {
			t.Fatal(err)
		}
		if string(stored) != string(h[:]) {
			t.Fatalf("stored hash = %x, want %x", stored, h)
		}
	}},
}

var walletCases = []storeCase{
	{"a wallet belongs to one agent per chain", func(t *testing.T, open storeOpen) {
		s, ctx := mustOpen(t, open), context.Background()
		a, b := mustAgent(t, s, "a"), mustAgent(t, s, "b")
		w := common.HexToAddress("0x209693Bc6afc0C5328bA36FaF03C514EF312287C")
		first, err := s.AddWallet(ctx, a.ID, 84532, w)
		if err != nil {
			t.Fatal(err)
		}
		steps := []struct {
			name  string
			agent string
			chain int64
			want  error
		}{
			{"the owner adds it again", a.ID, 84532, nil},
			{"another agent on the same chain", b.ID, 84532, ErrConflict},
			{"another agent on another chain", b.ID, 8453, nil},
			{"an unknown agent", "no-such-agent", 1, ErrNotFound},
		}
		for _, st := range steps {
			got, err := s.AddWallet(ctx, st.agent, st.chain, w)
			wantErr(t, st.name, err, st.want)
			if st.name == "the owner adds it again" && got != first {
				t.Fatalf("adding again = %+v, want the first %+v", got, first)
			}
		}
		cases := []struct {
			chain int64
			addr  common.Address
			owner string
			want  error
		}{
			{84532, w, a.ID, nil},
			{8453, w, b.ID, nil},
			{1, w, "", ErrNotFound},
			{84532, addr(99), "", ErrNotFound},
		}
		for _, tc := range cases {
			owner, err := s.WalletOwner(ctx, tc.chain, tc.addr)
			wantErr(t, fmt.Sprintf("WalletOwner(%d, %s)", tc.chain, tc.addr), err, tc.want)
			if owner != tc.owner {
				t.Fatalf("WalletOwner(%d, %s) = %q, want %q", tc.chain, tc.addr, owner, tc.owner)
			}
		}
		var stored string
		if err := s.db.QueryRowContext(ctx, `SELECT address FROM wallets WHERE chain_id = 84532`).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		if stored != strings.ToLower(w.Hex()) {
			t.Fatalf("stored address %q, want lower case", stored)
		}
	}},
	{"an agent's wallets list by chain then address", func(t *testing.T, open storeOpen) {
		s, ctx := mustOpen(t, open), context.Background()
		a, b := mustAgent(t, s, "a"), mustAgent(t, s, "b")
		for _, w := range []struct {
			chain int64
			addr  common.Address
		}{{84532, addr(2)}, {1, addr(3)}, {84532, addr(1)}} {
			if _, err := s.AddWallet(ctx, a.ID, w.chain, w.addr); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.AddWallet(ctx, b.ID, 1, addr(9)); err != nil {
			t.Fatal(err)
		}
		ws, err := s.Wallets(ctx, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, w := range ws {
			if w.AgentID != a.ID || w.CreatedAt.IsZero() {
				t.Fatalf("wallet %+v", w)
			}
			got = append(got, fmt.Sprintf("%d:%s", w.ChainID, w.Address.Hex()))
		}
		want := []string{"1:" + addr(3).Hex(), "84532:" + addr(1).Hex(), "84532:" + addr(2).Hex()}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Wallets = %v, want %v", got, want)
		}
	}},
	{"a wallet needs a positive chain id and a non-zero address", func(t *testing.T, open storeOpen) {
		s, ctx := mustOpen(t, open), context.Background()
		a := mustAgent(t, s, "a")
		_, err := s.AddWallet(ctx, a.ID, 0, addr(1))
		wantErr(t, "chain 0", err, ErrInvalid)
		_, err = s.AddWallet(ctx, a.ID, -5, addr(1))
		wantErr(t, "chain -5", err, ErrInvalid)
		_, err = s.AddWallet(ctx, a.ID, 1, common.Address{})
		wantErr(t, "zero address", err, ErrInvalid)
		if ws, _ := s.Wallets(ctx, a.ID); len(ws) != 0 {
			t.Fatalf("refused wallets were written: %+v", ws)
		}
	}},
	{"20 agents racing for one wallet on 3 handles: exactly one owns it", func(t *testing.T, open storeOpen) {
		handles := []*Store{mustOpen(t, open), mustOpen(t, open), mustOpen(t, open)}
		agents := make([]Agent, 20)
		for i := range agents {
			agents[i] = mustAgent(t, handles[0], fmt.Sprintf("racer-%02d", i))
		}
		var winner string
		wins := testenv.Race(t, 20, ErrConflict, func(i int) error {
			w, err := handles[i%3].AddWallet(context.Background(), agents[i].ID, 84532, addr(7))
			if err == nil {
				winner = w.AgentID
			}
			return err
		})
		if wins != 1 {
			t.Fatalf("%d agents got the wallet, want 1", wins)
		}
		if owner, err := handles[1].WalletOwner(context.Background(), 84532, addr(7)); err != nil || owner != winner {
			t.Fatalf("owner = %q, %v; want the winner %q", owner, err, winner)
		}
	}},
}
