package main

// Profiling and the memory soak of bench/run: CPU profiles of the built Caddy under a load,
// its resident memory over a long run, and the pprof tops that bench/results.md quotes.

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// profileCaddy takes a CPU profile of our Caddy from its admin endpoint for seconds, a
// second into load (run alone, unmeasured), and adds its top to the report's profiles.
func (e *env) profileCaddy(name, what string, seconds int, load func()) {
	prof := filepath.Join(e.dir, name+"-cpu.pprof")
	done := make(chan struct{})
	go func() {
		defer close(done)
		load()
	}()
	time.Sleep(time.Second)
	if err := fetchToFile(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", e.admin, seconds), prof); err != nil {
		logf("%s profile: %v", name, err)
	} else {
		e.rep.profiles = append(e.rep.profiles, profile{
			title: what + ", CPU, from the admin endpoint /debug/pprof/profile",
			top:   e.pprofTop(e.c.caddy, prof),
		})
	}
	<-done
}

func (e *env) soakRSS() {
	pid := e.caddy.pid()
	interval := max(2*time.Second, e.c.soak/60)
	startRSS, err := rssKB(pid)
	if err != nil {
		e.tb.Fatalf("rss: %v", err)
	}
	logf("soak: our paid path, %d concurrent, %s, VmRSS of caddy every %s", e.c.soakConc, e.c.soak, interval)
	var samples []int
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if v, err := rssKB(pid); err == nil {
					samples = append(samples, v)
				}
			}
		}
	}()
	res := closedLoop(e.c.soakConc, e.c.soak, e.paidJob(e.gateURL, nil, true))
	close(stop)
	<-sampled
	endRSS, _ := rssKB(pid)
	samples = append(samples, endRSS)
	lo, hi := slices.Min(samples), slices.Max(samples)
	// Flat: after the first sixth of the run (warm-up), RSS grows by at most maxSoakGrowth %.
	warm := samples[len(samples)/6]
	growth := 100 * float64(endRSS-warm) / float64(warm)
	verdict := "flat"
	if !goalByID("6e").met(growth) {
		verdict = "NOT flat"
	}
	logf("  RSS start %d kB, min %d, max %d, end %d; %d settled, %d failed", startRSS, lo, hi, endRSS, res.ok, res.failed)
	var series []string
	for _, s := range samples {
		series = append(series, strconv.Itoa(s/1024))
	}
	e.rep.soak = fmt.Sprintf("%s of paid requests at %d concurrent (%d settled, %d failed%s, %.0f/s): Caddy VmRSS start %.1f MiB (before load), min %.1f, max %.1f, end %.1f MiB; from the sample after the first sixth (%.1f MiB) to the end %+.1f%%: **%s**. Samples every %s (MiB): %s.",
		e.c.soak, e.c.soakConc, res.ok, res.failed, func() string {
			if res.failed > 0 {
				return ": " + res.topReasons()
			}
			return ""
		}(), res.rate(), float64(startRSS)/1024, float64(lo)/1024, float64(hi)/1024, float64(endRSS)/1024, float64(warm)/1024, growth, verdict, interval, strings.Join(series, " "))
	e.rep.headline = append(e.rep.headline, fmt.Sprintf("**Memory:** Caddy's RSS over a %s paid soak (%d settled): %.0f MiB after warm-up, %.0f MiB at the end (%+.1f%%): %s.",
		e.c.soak, res.ok, float64(warm)/1024, float64(endRSS)/1024, growth, verdict))
	x := row{section: memorySection, measure: fmt.Sprintf("Caddy RSS over a %s paid soak at c=%d: start → end (MiB)", e.c.soak, e.c.soakConc), ours: fmt.Sprintf("%.1f → %.1f", float64(startRSS)/1024, float64(endRSS)/1024), peer: "–", note: fmt.Sprintf("%s (%+.1f%% after warm-up; max %.1f MiB)", verdict, growth, float64(hi)/1024)}
	x.goal = e.rep.soakGoal(e.c.soak, e.c.soakConc, growth)
	e.rep.add(x)
}

// Goal 6e's soak: 10 minutes at c=64.
const (
	goalSoak     = 10 * time.Minute
	goalSoakConc = 64
)

// soakGoal records goal 6e of a soak of d at conc whose RSS grew by growth % after warm-up:
// met when it is flat and the soak was at least goalSoak at goalSoakConc.
func (r *report) soakGoal(d time.Duration, conc int, growth float64) string {
	g := goalByID("6e")
	after := fmt.Sprintf("%s over %s at c=%d", g.format(growth), d, conc)
	if d < goalSoak || conc != goalSoakConc {
		return r.judge("6e", after+fmt.Sprintf(", not the goal's %s at c=%d", goalSoak, goalSoakConc), false)
	}
	return r.judge("6e", after, g.met(growth))
}

func fetchToFile(url, path string) error {
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %d", url, resp.StatusCode)
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// pprofTop is the head of `go tool pprof -top` of a profile.
func (e *env) pprofTop(bin, prof string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := run(ctx, e.c.root, nil, "go", "tool", "pprof", "-top", "-cum", "-nodecount=30", bin, prof)
	if err != nil {
		return fmt.Sprintf("(go tool pprof failed: %v)", err)
	}
	return strings.TrimSpace(out)
}
