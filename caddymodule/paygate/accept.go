package paygate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/x402gate/x402gate/gate"
)

// maxSchemaFile bounds a schema file; the whole extension must fit 8 KiB anyway.
const maxSchemaFile = 64 << 10

// unmarshalAccept reads one `accept { … }` block; its options are recorded as
// "accept <n>/<option>" for errors.
func (h *Handler) unmarshalAccept(d *caddyfile.Dispenser) error {
	if d.NextArg() {
		return argErr(d)
	}
	i := len(h.Accepts)
	h.lines.set(gate.AcceptOption(i, ""), d)
	var a gate.AcceptConfig
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		opt := d.Val()
		h.lines.set(gate.AcceptOption(i, opt), d)
		switch opt {
		case "price":
			args := d.RemainingArgs()
			if len(args) == 0 || len(args) > 2 {
				return argErr(d)
			}
			a.Price = strings.Join(args, " ")
		case "network", "asset", "asset_name", "asset_version", "symbol", "pay_to", "transfer":
			dst := map[string]*string{"network": &a.Network, "asset": &a.Asset.Address, "asset_name": &a.Asset.Name,
				"asset_version": &a.Asset.Version, "symbol": &a.Asset.Symbol, "pay_to": &a.PayTo, "transfer": &a.Transfer}[opt]
			if err := oneArg(d, dst); err != nil {
				return err
			}
		case "decimals":
			if err := intArg(d, &a.Asset.Decimals); err != nil {
				return err
			}
		default:
			return d.Errf("unrecognized accept option %q", opt)
		}
	}
	if a == (gate.AcceptConfig{}) {
		return d.Errf("an accept block needs at least one of network, asset, price, pay_to, transfer")
	}
	h.Accepts = append(h.Accepts, a)
	return nil
}

// unmarshalDiscovery reads the `discovery { … }` block, and the schema files it names.
func (h *Handler) unmarshalDiscovery(d *caddyfile.Dispenser) error {
	if d.NextArg() {
		return argErr(d)
	}
	if h.Discovery != nil {
		return d.Errf("discovery is given twice")
	}
	dc := new(gate.DiscoveryConfig)
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		opt := d.Val()
		h.lines.set("discovery/"+opt, d)
		switch opt {
		case "service_name", "description", "method":
			dst := map[string]*string{"service_name": &dc.ServiceName, "description": &dc.Description, "method": &dc.Method}[opt]
			if err := oneArg(d, dst); err != nil {
				return err
			}
		case "tags":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return argErr(d)
			}
			dc.Tags = append(dc.Tags, args...)
		case "input_schema", "output_schema":
			var path string
			if err := oneArg(d, &path); err != nil {
				return err
			}
			raw, err := readSchemaFile(path)
			if err != nil {
				return d.Errf("%s: %v", opt, err)
			}
			if opt == "input_schema" {
				dc.InputSchema = raw
			} else {
				dc.OutputSchema = raw
			}
		default:
			return d.Errf("unrecognized discovery option %q", opt)
		}
	}
	h.Discovery = dc
	return nil
}

// readSchemaFile reads a schema file and compacts its JSON, so the adapted config holds
// it on one line; gate.Config.Validate checks what it says.
func readSchemaFile(path string) (json.RawMessage, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	// A device or a pipe states no size (/dev/zero would be read for ever): regular
	// files only, and never more than the cap, whatever Stat said.
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if st.Size() > maxSchemaFile {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxSchemaFile)
	}
	raw, err := io.ReadAll(io.LimitReader(f, maxSchemaFile+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %w", path, err)
	}
	if len(raw) > maxSchemaFile {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxSchemaFile)
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return nil, fmt.Errorf("%s is not JSON: %v", path, err)
	}
	return json.RawMessage(b.Bytes()), nil
}
