package gate

import (
	"errors"

	"github.com/x402gate/x402gate/gate/credit"
	"github.com/x402gate/x402gate/gate/discovery"
)

// DiscoveryConfig describes a route to discovery services (docs/gate.md#discovery): the
// v2 bazaar extension of every 402. It is discovery.Config.
type DiscoveryConfig = discovery.Config

// BazaarExtension is the key of the discovery extension in a PaymentRequired's extensions.
const BazaarExtension = discovery.BazaarExtension

// setExtensions builds the v2 extensions every 402 of the route carries.
func (route *routeConfig) setExtensions(cfg Config) error {
	route.extensions = map[string]any{}
	switch cfg.PaymentID {
	case "":
	case PaymentIDOptional, PaymentIDRequired:
		route.paymentID = cfg.PaymentID
		route.extensions[PaymentIdentifierExtension] = credit.PaymentIDDeclaration(cfg.PaymentID == PaymentIDRequired)
	default:
		return configErr("payment_id", "%q is not %s or %s", cfg.PaymentID, PaymentIDOptional, PaymentIDRequired)
	}
	if err := route.setDiscovery(cfg); err != nil {
		return err
	}
	if len(route.extensions) == 0 {
		route.extensions = nil
	}
	return nil
}

// setDiscovery checks cfg.Discovery and adds its bazaar extension. Errors are
// *ConfigError named "discovery/<option>".
func (route *routeConfig) setDiscovery(cfg Config) error {
	d := cfg.Discovery
	if d == nil {
		return nil
	}
	ext, err := d.Extension()
	if err != nil {
		if e, ok := errors.AsType[*ConfigError](err); ok {
			return &ConfigError{Option: "discovery/" + e.Option, Err: e.Err}
		}
		return err
	}
	if d.Description != "" {
		if route.resource.Description != "" && route.resource.Description != d.Description {
			return configErr("discovery/description", "differs from the route's description; set it once")
		}
		route.resource.Description = d.Description
	}
	route.serviceName = d.ServiceName
	route.tags = append([]string(nil), d.Tags...)
	route.extensions[BazaarExtension] = ext
	return nil
}
