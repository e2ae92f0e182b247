package verdictapp

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/x402gate/x402gate/verdictserver"
	"github.com/x402gate/x402gate/verdictserver/store"
)

// windowsCommand builds `caddy verdict windows` (docs/spend-windows.md#operator): the spend
// windows of an agent's active policy, now.
func windowsCommand() *cobra.Command {
	c := storeCmd("windows", "Shows an agent's spend windows: cap, used, reserved and left, in USD", 0, func(c *cobra.Command, op *verdictserver.Operator, st *store.Store, _ []string) error {
		id, err := agentFlag(c, st)
		if err != nil {
			return err
		}
		states, err := op.Windows(c.Context(), id, time.Now())
		if err != nil {
			return err
		}
		if len(states) == 0 {
			fmt.Fprintln(c.ErrOrStderr(), "the agent's active policy sets no spend window")
			return nil
		}
		fmt.Fprintln(c.OutOrStdout(), "period\tasset\tcap\tused\treserved\tleft")
		for _, s := range states {
			asset := s.Asset
			if asset == "" {
				asset = "*"
			}
			fmt.Fprintf(c.OutOrStdout(), "%s\t%s\t%s\t%s\t%s\t%s\n", s.Period, asset,
				strconv.FormatFloat(s.CapUSD, 'f', -1, 64), usdText(s.Used), usdText(s.Reserved), usdText(s.Left))
		}
		return nil
	})
	c.Flags().String("agent", "", "the agent's id or name")
	return c
}

// usdText is millionths of a USD as USD with six decimals.
func usdText(m int64) string { return strconv.FormatFloat(float64(m)/1e6, 'f', 6, 64) }
