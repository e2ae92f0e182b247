package store

import (
	"context"
	"fmt"
	"sort"
	"testing"

	"github.com/x402gate/x402gate/internal/testenv"
)

var policyCases = []storeCase{
	{"each SetPolicy makes the next immutable version, and the newest is active", func(t *testing.T, open storeOpen) {
		s, ctx := mustOpen(t, open), context.Background()
		a, b := mustAgent(t, s, "a"), mustAgent(t, s, "b")
		_, err := s.ActivePolicy(ctx, a.ID)
		wantErr(t, "ActivePolicy before any", err, ErrNotFound)
		_, err = s.ActivePolicyVersion(ctx, a.ID)
		wantErr(t, "ActivePolicyVersion before any", err, ErrNotFound)
		docs := []string{
			`{"description":"first"}`,
			"{\n  \"limits\": {\"perTxUsd\": 10.50},\n  \"description\": \"kept byte for byte\"\n}",
			`{"recipients":{"allowed":["self"]}}`,
		}
		for i, doc := range docs {
			p, err := s.SetPolicy(ctx, a.ID, []byte(doc), fmt.Sprintf("actor-%d", i))
			if err != nil {
				t.Fatal(err)
			}
			if p.Version != int64(i+1) || p.AgentID != a.ID || string(p.Document) != doc || p.Actor != fmt.Sprintf("actor-%d", i) {
				t.Fatalf("SetPolicy %d = %+v", i, p)
			}
		}
		if p, err := s.SetPolicy(ctx, b.ID, []byte(`{}`), "cli"); err != nil || p.Version != 1 {
			t.Fatalf("another agent's first policy = %+v, %v; want version 1", p, err)
		}
		active, err := s.ActivePolicy(ctx, a.ID)
		if err != nil || active.Version != 3 || string(active.Document) != docs[2] {
			t.Fatalf("ActivePolicy = %+v, %v; want version 3", active, err)
		}
		for agent, want := range map[string]int64{a.ID: 3, b.ID: 1} {
			if v, err := s.ActivePolicyVersion(ctx, agent); err != nil || v != want {
				t.Fatalf("ActivePolicyVersion(%s) = %d, %v; want %d", agent, v, err, want)
			}
		}
		second, err := s.Policy(ctx, a.ID, 2)
		if err != nil || string(second.Document) != docs[1] || second.Actor != "actor-1" || second.CreatedAt.IsZero() {
			t.Fatalf("Policy 2 = %+v, %v; want the second document unchanged", second, err)
		}
		all, err := s.PolicyVersions(ctx, a.ID)
		if err != nil || len(all) != 3 {
			t.Fatalf("PolicyVersions = %+v, %v", all, err)
		}
		for i, p := range all {
			if p.Version != int64(i+1) || string(p.Document) != docs[i] {
				t.Fatalf("version %d = %+v, want document %s", i+1, p, docs[i])
			}
		}
		if !all[2].CreatedAt.Equal(active.CreatedAt) || all[2].Actor != active.Actor {
			t.Fatalf("listed and active versions differ: %+v %+v", all[2], active)
		}
		_, err = s.Policy(ctx, a.ID, 4)
		wantErr(t, "Policy 4", err, ErrNotFound)
		_, err = s.Policy(ctx, b.ID, 2)
		wantErr(t, "another agent's version 2", err, ErrNotFound)
	}},
	{"a policy needs a known agent, a JSON object and an actor", func(t *testing.T, open storeOpen) {
		s, ctx := mustOpen(t, open), context.Background()
		a := mustAgent(t, s, "a")
		cases := []struct {
			name  string
			agent string
			doc   string
			actor string
			want  error
		}{
			{"an unknown agent", "no-such-agent", `{}`, "cli", ErrNotFound},
			{"an array", a.ID, `[]`, "cli", ErrInvalid},
			{"a string", a.ID, `"policy"`, "cli", ErrInvalid},
			{"broken JSON", a.ID, `{"a":`, "cli", ErrInvalid},
			{"two objects", a.ID, `{} {}`, "cli", ErrInvalid},
			{"invalid UTF-8", a.ID, "{\"a\":\"\xff\"}", "cli", ErrInvalid},
			{"no actor", a.ID, `{}`, "", ErrInvalid},
		}
		for _, tc := range cases {
			_, err := s.SetPolicy(ctx, tc.agent, []byte(tc.doc), tc.actor)
			wantErr(t, tc.name, err, tc.want)
		}
		if vs, err := s.PolicyVersions(ctx, a.ID); err != nil || len(vs) != 0 {
			t.Fatalf("refused policies were written: %+v, %v", vs, err)
		}
		if p, err := s.SetPolicy(ctx, a.ID, []byte(`{}`), "cli"); err != nil || p.Version != 1 {
			t.Fatalf("first accepted policy = %+v, %v; want version 1", p, err)
		}
	}},
	{"20 concurrent SetPolicy calls on 3 handles get versions 1 to 20, each its own", func(t *testing.T, open storeOpen) {
		handles := []*Store{mustOpen(t, open), mustOpen(t, open), mustOpen(t, open)}
		a := mustAgent(t, handles[0], "contended")
		other := mustAgent(t, handles[0], "bystander")
		got := make([]int64, 20)
		wins := testenv.Race(t, 20, nil, func(i int) error {
			p, err := handles[i%3].SetPolicy(context.Background(), a.ID, []byte(fmt.Sprintf(`{"description":"call %d"}`, i)), "racer")
			got[i] = p.Version
			return err
		})
		if wins != 20 {
			t.Fatalf("%d of 20 SetPolicy calls succeeded", wins)
		}
		sorted := append([]int64(nil), got...)
		sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
		for i, v := range sorted {
			if v != int64(i+1) {
				t.Fatalf("versions %v: want 1..20, each once", sorted)
			}
		}
		for i, v := range got {
			p, err := handles[(i+1)%3].Policy(context.Background(), a.ID, v)
			if err != nil || string(p.Document) != fmt.Sprintf(`{"description":"call %d"}`, i) {
				t.Fatalf("version %d = %+v, %v; want call %d's document", v, p, err, i)
			}
		}
		if p, err := handles[2].SetPolicy(context.Background(), other.ID, []byte(`{}`), "cli"); err != nil || p.Version != 1 {
			t.Fatalf("another agent after the race = %+v, %v; want version 1", p, err)
		}
	}},
}
