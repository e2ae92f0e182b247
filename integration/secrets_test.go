package integration_test

// canary holds the known values the integration tests use for their secrets, so that every
// output can be scanned for them (docs/caddy.md#secrets).
var canary = struct {
	verdictKey, facilitatorKey, adminKey, passKey, passKeyOld, redisPassword, pgPassword string
}{
	verdictKey:     "vk_canary_verdict_key_5d1e8a3f9b2c7e40",
	facilitatorKey: "canary_facilitator_key_7c2a9e4b1f6d3058",
	adminKey:       "canary_admin_key_3e8b5c1a7f9d2406",
	passKey:        "canary_pass_key_b6e2f9a41c7d3850e9f1a2b3c4d5e6f7",
	passKeyOld:     "canary_pass_key_old_0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d",
	redisPassword:  "canaryRedisPassword4f7a1c9e2b",
	pgPassword:     "canaryPgPassword8d3b6e0a5c2f",
}
