// The reference x402 stack that bench/run compares x402gate with, from the npm packages pinned
// in bench/package.json (x402 1.2.0, x402-express 1.2.0). One process, one role:
//
//   node bench/ref.mjs facilitator   the facilitator: POST /verify and /settle call verify and
//                                     settle of x402/facilitator, as the x402 v1 example
//                                     facilitator does, on the local chain
//   node bench/ref.mjs gate          an Express app with paymentMiddleware of x402-express in
//                                     front of the upstream, asking that facilitator
//
// Configuration comes from the environment (bench/cmd/bench sets it): REF_PORT, REF_RPC_URL,
// REF_SIGNER_KEY_FILE (the facilitator's key, read from a file, never argv or logs),
// REF_FACILITATOR_URL, REF_UPSTREAM_URL, REF_PAY_TO, REF_TOKEN, REF_PRICE (base units),
// REF_PATH. The chain is anvil with chain id 84532, so the network is base-sepolia with the
// token deployed on it (the price names the token, so x402 uses it instead of its USDC table).
import { readFileSync } from "node:fs";
import express from "express";
import { createPublicClient, createWalletClient, http, publicActions } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { baseSepolia } from "viem/chains";
import { settle, verify } from "x402/facilitator";
import { PaymentPayloadSchema, PaymentRequirementsSchema } from "x402/types";
import { paymentMiddleware } from "x402-express";

const env = (name) => {
	const v = process.env[name];
	if (!v) {
		console.error(`ref.mjs: ${name} is not set`);
		process.exit(2);
	}
	return v;
};

function facilitator() {
	const transport = http(env("REF_RPC_URL"));
	// x402's createConnectedClient and createSigner, with the local chain's RPC URL instead of
	// the public one (they take no URL). Made once, not per request as the example does.
	const client = createPublicClient({ chain: baseSepolia, transport });
	const key = readFileSync(env("REF_SIGNER_KEY_FILE"), "utf8").trim();
	const signer = createWalletClient({
		chain: baseSepolia,
		transport,
		account: privateKeyToAccount(key),
	}).extend(publicActions);

	const app = express();
	app.use(express.json());
	app.post("/verify", async (req, res) => {
		try {
			const requirements = PaymentRequirementsSchema.parse(req.body.paymentRequirements);
			const payload = PaymentPayloadSchema.parse(req.body.paymentPayload);
			res.json(await verify(client, payload, requirements));
		} catch (e) {
			console.error("verify:", e?.shortMessage ?? e?.message ?? e);
			res.status(400).json({ error: String(e?.shortMessage ?? e?.message ?? e) });
		}
	});
	app.post("/settle", async (req, res) => {
		try {
			const requirements = PaymentRequirementsSchema.parse(req.body.paymentRequirements);
			const payload = PaymentPayloadSchema.parse(req.body.paymentPayload);
			res.json(await settle(signer, payload, requirements));
		} catch (e) {
			console.error("settle:", e?.shortMessage ?? e?.message ?? e);
			res.status(400).json({ error: String(e?.shortMessage ?? e?.message ?? e) });
		}
	});
	app.get("/health", (_req, res) => res.json({ status: "ok" }));
	return app;
}

function gate() {
	const upstream = env("REF_UPSTREAM_URL");
	const path = env("REF_PATH");
	const app = express();
	app.get("/health", (_req, res) => res.json({ status: "ok" }));
	app.use(
		paymentMiddleware(
			env("REF_PAY_TO"),
			{
				[path]: {
					price: {
						amount: env("REF_PRICE"),
						asset: { address: env("REF_TOKEN"), decimals: 6, eip712: { name: "USDC", version: "2" } },
					},
					network: "base-sepolia",
					config: { description: "bench", mimeType: "application/json" },
				},
			},
			{ url: env("REF_FACILITATOR_URL") },
		),
	);
	// The upstream, proxied: the same server the x402gate gate's reverse_proxy calls.
	app.get(path, async (_req, res) => {
		try {
			const r = await fetch(upstream);
			const body = await r.text();
			res.status(r.status).type(r.headers.get("content-type") ?? "application/json").send(body);
		} catch (e) {
			res.status(502).json({ error: "upstream" });
		}
	});
	return app;
}

const role = process.argv[2];
const app = role === "facilitator" ? facilitator() : role === "gate" ? gate() : null;
if (!app) {
	console.error("usage: node bench/ref.mjs facilitator|gate");
	process.exit(2);
}
const server = app.listen(Number(env("REF_PORT")), "127.0.0.1", () => {
	console.log(`ref ${role} listening on 127.0.0.1:${server.address().port}`);
});
server.keepAliveTimeout = 65_000;
for (const sig of ["SIGTERM", "SIGINT"]) process.on(sig, () => process.exit(0));
