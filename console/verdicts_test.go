package console

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdictserver/store"
)

// stored writes n judged actions of the agent straight to the store, one a second from
// start, the first one refused and the others approved, and returns their request hashes,
// oldest first. Eight at a time, as the service's workers would, so that the group commit
// makes it quick.
func stored(t *testing.T, e *env, agentID string, start time.Time, n int) []string {
	t.Helper()
	hashes := make([]string, n)
	errs := make(chan error, n)
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i := range n {
		hashes[i] = fmt.Sprintf("0x%064x", start.Unix()*1000+int64(i))
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs <- storeJudged(e.st, agentID, hashes[i], start.Add(time.Duration(i)*time.Second), i == 0)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return hashes
}

func storeJudged(st *store.Store, agentID, hash string, at time.Time, refused bool) error {
	ctx := context.Background()
	tx := &store.Transaction{RequestHash: hash, AgentID: agentID, Escrow: common.HexToAddress("0x1"), ChainID: testChain,
		Prompt: "stored " + hash, ProposedTx: []byte(`{"protocol":"payment"}`), CreatedAt: at}
	if err := st.CreateTransaction(ctx, tx); err != nil {
		return err
	}
	status, doc := store.StatusApproved, `{"outcome":"approved","reasonCode":"allowed","humanReason":"allowed","mode":"enforce"}`
	if refused {
		status, doc = store.StatusRejected, `{"outcome":"rejected","reasonCode":"recipient_not_allowed","humanReason":"a stranger","mode":"enforce"}`
	}
	one := int64(1)
	return st.Complete(ctx, hash, status, []byte(doc), &one)
}

var nextLink = regexp.MustCompile(`<a id="next" rel="next" href="([^"]+)">`)

// TestVerdictsSearchTheWholeHistory: a filter finds an action older than the newest 500 of
// its agent; a list longer than a page is read to its end by the next-page links, each
// action once, newest first; a cursor that does not parse is a 400 with a way back.
func TestVerdictsSearchTheWholeHistory(t *testing.T) {
	e := newEnv(t, Config{}, false)
	busy := e.agent("busy", allowPolicy)
	_ = e.srv.Close() // its sweeper would judge the records stored pending, before the test does
	hashes := stored(t, e, busy.ID, time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), 2*store.MaxPage+10)
	b := e.browser()
	b.signIn(adminKey)

	p := b.get("/console/verdicts?outcome=rejected")
	if p.status != http.StatusOK || !strings.Contains(p.body, hashes[0]) || strings.Contains(p.body, hashes[1]) {
		t.Fatalf("outcome=rejected does not find the one refusal, behind %d newer actions: %d\n%s", len(hashes)-1, p.status, text(p.body))
	}
	if !strings.Contains(b.get("/console/verdicts?reason=recipient_not_allowed&agent="+busy.ID).body, hashes[0]) {
		t.Error("reason=recipient_not_allowed does not find the refusal")
	}

	var seen []string
	path := "/console/verdicts?outcome=approved&agent=" + busy.ID + "&since=2026-03-01"
	for pages := 0; path != ""; pages++ {
		if pages > len(hashes)/verdictsShown+1 {
			t.Fatalf("more than %d pages", pages)
		}
		p := b.get(path)
		if p.status != http.StatusOK {
			t.Fatalf("%s: %d\n%s", path, p.status, text(p.body))
		}
		n := 0
		for _, h := range regexp.MustCompile(`<a class="mono" href="/console/verdicts/(0x[0-9a-f]{64})">`).FindAllStringSubmatch(p.body, -1) {
			seen = append(seen, h[1])
			n++
		}
		if n > verdictsShown {
			t.Fatalf("%s shows %d rows, more than a page", path, n)
		}
		path = ""
		if m := nextLink.FindStringSubmatch(p.body); m != nil {
			path = html.UnescapeString(m[1])
			if !strings.Contains(path, "outcome=approved") || !strings.Contains(path, "since=2026-03-01") {
				t.Fatalf("the next page %s drops the filter", path)
			}
		}
	}
	if len(seen) != len(hashes)-1 {
		t.Fatalf("the pages show %d actions, want the %d approved", len(seen), len(hashes)-1)
	}
	for i, h := range seen {
		if want := hashes[len(hashes)-1-i]; h != want {
			t.Fatalf("row %d of the pages is %s, want %s: not each once, newest first", i, h, want)
		}
	}

	bad := b.get("/console/verdicts?outcome=approved&after=yesterday")
	if bad.status != http.StatusBadRequest || !strings.Contains(text(bad.body), "is not a page of this list") ||
		!strings.Contains(bad.body, `<a id="first" href="/console/verdicts?outcome=approved">`) {
		t.Errorf("a cursor that does not parse: %d\n%s", bad.status, bad.body)
	}
}
