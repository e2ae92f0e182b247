package verdictapp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/x402gate/x402gate/internal/sqldb"
	"github.com/x402gate/x402gate/verdictserver"
	"github.com/x402gate/x402gate/verdictserver/policy"
	"github.com/x402gate/x402gate/verdictserver/store"
)

// The `caddy verdict` subcommands (docs/caddy.md#operator-commands): operators manage agents,
// keys, wallets and policies in the very store the verdict app of a config uses, through
// the same functions as the admin API (verdictserver.Operator).

func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  "verdict",
		Usage: "<agent|key|wallet|policy> ...",
		Short: "Manages the verdict service's agents, keys, wallets and policies",
		Long: `Manages the store of the verdict app that the config (--config, default ./Caddyfile)
declares in its verdict global option: the same database a running Caddy uses.

  caddy verdict agent add <name>
  caddy verdict agent list
  caddy verdict key create --agent <agent> [--scope <scope>]...   (the key is printed once)
  caddy verdict key revoke <key id>
  caddy verdict key list --agent <agent>
  caddy verdict wallet add --agent <agent> --chain <chain id> <address>
  caddy verdict wallet list --agent <agent>
  caddy verdict policy validate <file>
  caddy verdict policy set --agent <agent> <file>
  caddy verdict policy versions --agent <agent>
  caddy verdict policy show --agent <agent> [--version <n>]
  caddy verdict policy replay --agent <agent> [--last <n>] [--json] <file>   (stores nothing)
  caddy verdict windows --agent <agent>

<agent> is an agent's id or its name.`,
		CobraFunc: verdictCommand,
	})
}

// verdictCommand builds the command tree under `caddy verdict`.
func verdictCommand(cmd *cobra.Command) {
	cmd.PersistentFlags().StringP("config", "c", "", "Configuration file (default: ./Caddyfile)")
	cmd.PersistentFlags().StringP("adapter", "a", "", "Name of config adapter to apply")

	agent := &cobra.Command{Use: "agent", Short: "Agents"}
	agent.AddCommand(
		storeCmd("add <name>", "Creates an agent and prints its id", 1, func(c *cobra.Command, op *verdictserver.Operator, st *store.Store, args []string) error {
			a, err := op.CreateAgent(c.Context(), args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "%s\t%s\n", a.ID, a.Name)
			return nil
		}),
		storeCmd("list", "Lists the agents", 0, func(c *cobra.Command, op *verdictserver.Operator, st *store.Store, _ []string) error {
			as, err := op.Agents(c.Context())
			if err != nil {
				return err
			}
			for _, a := range as {
				fmt.Fprintf(c.OutOrStdout(), "%s\t%s\t%s\n", a.ID, a.Name, a.CreatedAt.UTC().Format(time.RFC3339))
			}
			return nil
		}),
	)

	key := &cobra.Command{Use: "key", Short: "API keys"}
	create := storeCmd("create", "Creates an API key and prints it, once, on standard output", 0, func(c *cobra.Command, op *verdictserver.Operator, st *store.Store, _ []string) error {
		agentID, err := agentFlag(c, st)
		if err != nil {
			return err
		}
		scopes, _ := c.Flags().GetStringSlice("scope")
		k, plaintext, err := op.CreateKey(c.Context(), agentID, scopes)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.ErrOrStderr(), "key %s for agent %s, scopes %v; it is shown only now, store it as a secret\n", k.ID, agentID, k.Scopes)
		fmt.Fprintln(c.OutOrStdout(), plaintext)
		return nil
	})
	create.Flags().StringSlice("scope", nil, "A scope of the key (repeatable; default: verdicts:create:own and verdicts:read:own)")
	key.AddCommand(
		create,
		storeCmd("revoke <key id>", "Revokes a key", 1, func(c *cobra.Command, op *verdictserver.Operator, st *store.Store, args []string) error {
			return op.RevokeKey(c.Context(), args[0])
		}),
		storeCmd("list", "Lists an agent's keys (never the keys themselves)", 0, func(c *cobra.Command, op *verdictserver.Operator, st *store.Store, _ []string) error {
			agentID, err := agentFlag(c, st)
			if err != nil {
				return err
			}
			ks, err := op.Keys(c.Context(), agentID)
			if err != nil {
				return err
			}
			for _, k := range ks {
				state := "active"
				if k.RevokedAt != nil {
					state = "revoked"
				}
				fmt.Fprintf(c.OutOrStdout(), "%s\t%s\t%v\n", k.ID, state, k.Scopes)
			}
			return nil
		}),
	)

	wallet := &cobra.Command{Use: "wallet", Short: "Registered wallets"}
	add := storeCmd("add <address>", "Registers a wallet of an agent on a chain", 1, func(c *cobra.Command, op *verdictserver.Operator, st *store.Store, args []string) error {
		agentID, err := agentFlag(c, st)
		if err != nil {
			return err
		}
		chain, _ := c.Flags().GetInt64("chain")
		w, err := op.AddWallet(c.Context(), agentID, chain, args[0])
		if err != nil {
			return err
		}
		fmt.Fprintf(c.OutOrStdout(), "%s\t%d\t%s\n", w.AgentID, w.ChainID, w.Address.Hex())
		return nil
	})
	add.Flags().Int64("chain", 0, "The chain id (required)")
	wallet.AddCommand(add,
		storeCmd("list", "Lists an agent's wallets", 0, func(c *cobra.Command, op *verdictserver.Operator, st *store.Store, _ []string) error {
			agentID, err := agentFlag(c, st)
			if err != nil {
				return err
			}
			ws, err := op.Wallets(c.Context(), agentID)
			if err != nil {
				return err
			}
			for _, w := range ws {
				fmt.Fprintf(c.OutOrStdout(), "%d\t%s\n", w.ChainID, w.Address.Hex())
			}
			return nil
		}),
	)

	pol := &cobra.Command{Use: "policy", Short: "Versioned policies"}
	show := storeCmd("show", "Prints a policy version (default: the active one)", 0, func(c *cobra.Command, op *verdictserver.Operator, st *store.Store, _ []string) error {
		agentID, err := agentFlag(c, st)
		if err != nil {
			return err
		}
		v, _ := c.Flags().GetInt64("version")
		var pv store.PolicyVersion
		if v > 0 {
			pv, err = st.Policy(c.Context(), agentID, v)
		} else {
			pv, err = st.ActivePolicy(c.Context(), agentID)
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(c.OutOrStdout(), "%s\n", pv.Document)
		return nil
	})
	show.Flags().Int64("version", 0, "The version (default: the newest)")
	pol.AddCommand(
		&cobra.Command{
			Use: "validate <file>", Short: "Checks a policy document against the schema; each error names its field",
			Args: cobra.ExactArgs(1),
			RunE: func(c *cobra.Command, args []string) error {
				doc, err := readPolicyFile(args[0])
				if err != nil {
					return err
				}
				if _, err := policy.Parse(doc); err != nil {
					return policyErrors(c.ErrOrStderr(), err)
				}
				fmt.Fprintf(c.OutOrStdout(), "%s: valid\n", args[0])
				return nil
			},
		},
		storeCmd("set <file>", "Stores a policy document as the agent's next version", 1, func(c *cobra.Command, op *verdictserver.Operator, st *store.Store, args []string) error {
			agentID, err := agentFlag(c, st)
			if err != nil {
				return err
			}
			doc, err := readPolicyFile(args[0])
			if err != nil {
				return err
			}
			pv, err := op.SetPolicy(c.Context(), agentID, doc, "cli")
			if err != nil {
				return policyErrors(c.ErrOrStderr(), err)
			}
			fmt.Fprintf(c.OutOrStdout(), "%s\tversion %d\n", pv.AgentID, pv.Version)
			return nil
		}),
		storeCmd("versions", "Lists an agent's policy versions", 0, func(c *cobra.Command, op *verdictserver.Operator, st *store.Store, _ []string) error {
			agentID, err := agentFlag(c, st)
			if err != nil {
				return err
			}
			vs, err := op.PolicyVersions(c.Context(), agentID)
			if err != nil {
				return err
			}
			for _, v := range vs {
				fmt.Fprintf(c.OutOrStdout(), "%d\t%s\t%s\n", v.Version, v.CreatedAt.UTC().Format(time.RFC3339), v.Actor)
			}
			return nil
		}),
		show,
		replayCommand(),
	)
	for _, sub := range []*cobra.Command{agent, key, wallet, pol} {
		for _, c := range sub.Commands() {
			if c.Flags().Lookup("agent") == nil && c.Name() != "validate" && !(sub == agent) && !(sub == key && c.Name() == "revoke") {
				c.Flags().String("agent", "", "The agent's id or name (required)")
			}
		}
	}
	cmd.AddCommand(agent, key, wallet, pol, txCommand(), windowsCommand())
}

// storeCmd is a subcommand that runs fn on the operator of the config's verdict store.
func storeCmd(use, short string, nargs int, fn func(*cobra.Command, *verdictserver.Operator, *store.Store, []string) error) *cobra.Command {
	return &cobra.Command{
		Use: use, Short: short, Args: cobra.ExactArgs(nargs),
		SilenceUsage: true,
		RunE: func(c *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(c.Context(), openTimeout)
			defer cancel()
			c.SetContext(ctx)
			st, err := openConfiguredStore(ctx, c)
			if err != nil {
				return err
			}
			defer st.Close()
			return fn(c, verdictserver.NewOperator(st), st, args)
		},
	}
}

// openConfiguredStore opens the verdict store the config names (--config, --adapter).
func openConfiguredStore(ctx context.Context, c *cobra.Command) (*store.Store, error) {
	rv, err := configuredVerdict(c)
	if err != nil {
		return nil, err
	}
	db, err := rv.store.Open(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("opening the verdict store: %w", err)
	}
	return store.Open(ctx, db)
}

// configuredVerdict is the verdict app of the config (--config, --adapter), resolved, with
// a store that exists.
func configuredVerdict(c *cobra.Command) (*resolvedVerdict, error) {
	cfgFile, _ := c.Flags().GetString("config")
	adapter, _ := c.Flags().GetString("adapter")
	cfgJSON, _, _, err := caddycmd.LoadConfig(cfgFile, adapter)
	if err != nil {
		return nil, err
	}
	if len(cfgJSON) == 0 {
		return nil, errors.New("no config: give --config <Caddyfile> with a verdict global option")
	}
	app, err := verdictAppOf(cfgJSON)
	if err != nil {
		return nil, err
	}
	rv, err := app.resolve()
	if err != nil {
		return nil, err
	}
	if err := existingStore(c.ErrOrStderr(), rv); err != nil {
		return nil, err
	}
	return rv, nil
}

// existingStore names on w the store a command opens, and refuses an SQLite file that does
// not exist: a command works on the store the verdict app made, and never makes a new,
// empty one (a relative path is read from the current directory, so a command run from
// another directory would otherwise read and write a store of its own). The PostgreSQL DSN
// is a secret and is not named.
func existingStore(w io.Writer, rv *resolvedVerdict) error {
	if rv.store.Type == sqldb.Postgres.Name {
		fmt.Fprintln(w, "verdict store: postgres (the DSN of the config)")
		return nil
	}
	abs, err := filepath.Abs(rv.store.Path)
	if err != nil {
		return fmt.Errorf("verdict store %s: %w", rv.store.Path, err)
	}
	if _, err := os.Stat(abs); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("no verdict store at %s: the verdict app creates it when Caddy runs this config; a relative store path is read from the current directory", abs)
		}
		return fmt.Errorf("verdict store %s: %w", abs, err)
	}
	rv.store.Path = abs
	fmt.Fprintln(w, "verdict store: "+abs)
	return nil
}

// agentFlag resolves --agent, an agent's id or name, to its id.
func agentFlag(c *cobra.Command, st *store.Store) (string, error) {
	ref, _ := c.Flags().GetString("agent")
	if ref == "" {
		return "", errors.New("--agent is required")
	}
	if a, err := st.Agent(c.Context(), ref); err == nil {
		return a.ID, nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return "", err
	}
	a, err := st.AgentByName(c.Context(), ref)
	if errors.Is(err, store.ErrNotFound) {
		return "", fmt.Errorf("no agent has the id or name %q", ref)
	}
	return a.ID, err
}

// readPolicyFile reads a policy document, at most 1 MiB.
func readPolicyFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	doc, err := io.ReadAll(io.LimitReader(f, 1<<20+1))
	if err != nil {
		return nil, err
	}
	if len(doc) > 1<<20 {
		return nil, fmt.Errorf("%s: larger than 1 MiB", path)
	}
	return doc, nil
}

// policyErrors prints each field error of a policy document on its own line.
func policyErrors(w io.Writer, err error) error {
	var pe *policy.Errors
	if !errors.As(err, &pe) {
		return err
	}
	for _, p := range pe.Problems {
		fmt.Fprintf(w, "%s: %s\n", p.Field, p.Problem)
	}
	if len(pe.Problems) == 1 {
		return errors.New("the policy document is invalid (1 problem)")
	}
	return errors.New("the policy document is invalid (" + strconv.Itoa(len(pe.Problems)) + " problems)")
}
