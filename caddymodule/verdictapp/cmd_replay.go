package verdictapp

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/x402gate/x402gate/verdictserver"
)

// replayCommand builds `caddy verdict policy replay` (docs/replay.md#the-command): a draft
// policy judged on the agent's last stored actions by the engine the config's verdict app
// builds (its sanctions list, prices, feeds and chains), through the Operator of a verdict
// server whose workers never start. Nothing is written.
func replayCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "replay <file>",
		Short: "Shows which of the agent's last stored actions a draft policy would newly refuse or approve; stores nothing",
		Args:  cobra.ExactArgs(1), SilenceUsage: true,
		RunE: func(c *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(c.Context(), openTimeout)
			defer cancel()
			c.SetContext(ctx)
			draft, err := readPolicyFile(args[0])
			if err != nil {
				return err
			}
			rv, err := configuredVerdict(c)
			if err != nil {
				return err
			}
			svc, err := openVerdictService(rv, zap.NewNop())
			if err != nil {
				return err
			}
			defer svc.Destruct()
			agentID, err := agentFlag(c, svc.store)
			if err != nil {
				return err
			}
			last, _ := c.Flags().GetInt("last")
			rep, err := svc.server.Operator().Replay(ctx, agentID, draft, last)
			if err != nil {
				return policyErrors(c.ErrOrStderr(), err)
			}
			if asJSON, _ := c.Flags().GetBool("json"); asJSON {
				enc := json.NewEncoder(c.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			printReplay(c.OutOrStdout(), rep)
			return nil
		},
	}
	c.Flags().Int("last", 0, fmt.Sprintf("How many of the agent's newest stored actions to replay (default %d, at most %d)", verdictserver.DefaultReplayLast, verdictserver.MaxReplayLast))
	c.Flags().Bool("json", false, "Print the report as JSON, as the admin route answers it")
	return c
}

// printReplay writes the report for a person: the counts, then one line per changed
// action with the draft's reason (newly refused) or the stored one (newly approved). The
// agent's own text (the description) is left to --json.
func printReplay(w io.Writer, rep verdictserver.ReplayReport) {
	fmt.Fprintf(w, "draft judged as policy version %d (active: %d), mode %s, spend windows %s\n",
		rep.DraftVersion, rep.ActivePolicyVersion, rep.Mode, rep.SpendWindows)
	fmt.Fprintf(w, "last %d: replayed %d, unchanged %d, skipped %d", rep.Last, rep.Replayed, rep.Unchanged, rep.Skipped)
	if rep.Skipped > 0 {
		var why []string
		for _, k := range slices.Sorted(maps.Keys(rep.SkippedWhy)) {
			why = append(why, fmt.Sprintf("%s %d", k, rep.SkippedWhy[k]))
		}
		fmt.Fprintf(w, " (%s)", strings.Join(why, ", "))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "newly refused: %d\n", len(rep.NewlyRefused))
	for _, ch := range rep.NewlyRefused {
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\n", ch.RequestHash, ch.CreatedAt.UTC().Format(time.RFC3339), ch.Draft.ReasonCode, ch.Draft.HumanReason)
	}
	fmt.Fprintf(w, "newly approved: %d\n", len(rep.NewlyApproved))
	for _, ch := range rep.NewlyApproved {
		fmt.Fprintf(w, "  %s\t%s\twas %s\t%s\n", ch.RequestHash, ch.CreatedAt.UTC().Format(time.RFC3339), ch.Stored.ReasonCode, ch.Stored.HumanReason)
	}
}
