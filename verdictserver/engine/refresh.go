package engine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/x402gate/x402gate/verdictserver/engine/sanctions"
)

// RefreshSanctions reloads Config.Sanctions when it changed (modification time or size)
// since the list in use was loaded, and reports whether it did. On error the list in use stays
// (docs/policy.md#refreshing-the-list), and so does a new file without any address when the
// list in use has some.
func (e *Evaluator) RefreshSanctions() (bool, error) {
	if e.file == "" {
		return false, fmt.Errorf("engine: no sanctions file configured")
	}
	fi, err := os.Stat(e.file)
	if err != nil {
		return false, fmt.Errorf("engine: sanctions list: %w", err)
	}
	cur := e.sanctions.Load()
	if cur.SameFile(fi) {
		return false, nil
	}
	l, err := sanctions.Load(e.file)
	if err != nil {
		return false, fmt.Errorf("engine: %w", err)
	}
	if l.Len() == 0 && cur != nil && cur.Len() > 0 {
		// A file caught half written, or truncated: never trade a list for an empty one.
		return false, fmt.Errorf("engine: sanctions list %s: no addresses; the list in use (%d) stays", filepath.Base(e.file), cur.Len())
	}
	e.sanctions.Store(l)
	return true, nil
}

// RefreshSanctionsEvery calls RefreshSanctions every interval until ctx is done. Each outcome
// goes to report (nil error and changed false: the file did not change); a failed refresh
// keeps the list in use. It returns when ctx is done.
func (e *Evaluator) RefreshSanctionsEvery(ctx context.Context, every time.Duration, report func(changed bool, err error)) {
	if every <= 0 || e.file == "" {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			changed, err := e.RefreshSanctions()
			if report != nil {
				report(changed, err)
			}
		}
	}
}
