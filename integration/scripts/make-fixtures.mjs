// make-fixtures.mjs writes x402/testdata/fixtures.json: X-PAYMENT and PAYMENT-SIGNATURE
// header values made offline by the real x402 clients, plus PAYMENT-REQUIRED and
// settlement headers encoded by the SDKs, for the Go decoders' tests and fuzz corpus.
//
//   cd integration && node scripts/make-fixtures.mjs
//
// Clients driven:
//   - x402 1.2.0 (the library under x402-fetch 1.2.0): createPaymentHeader from x402/client;
//   - @x402/core 2.27 x402Client + x402HTTPClient with @x402/evm 2.27 registerExactEvmScheme,
//     answering a v2 PAYMENT-REQUIRED header (PAYMENT-SIGNATURE) and a v1 402 body (X-PAYMENT),
//     exactly as @x402/fetch does.
// The signer is anvil's first well-known development key, which is public and holds no
// real funds. No network access is needed: viem signs typed data locally.
import { writeFileSync, mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { privateKeyToAccount } from "viem/accounts";
import { createPaymentHeader } from "x402/client";
import { settleResponseHeader } from "x402/types";
import { x402Client } from "@x402/core/client";
import { x402HTTPClient, encodePaymentRequiredHeader, encodePaymentResponseHeader } from "@x402/core/http";
import { registerExactEvmScheme } from "@x402/evm/exact/client";

const ANVIL_KEY = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";
const account = privateKeyToAccount(ANVIL_KEY);

const PAY_TO = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
const RESOURCE = "https://api.example.com/premium";

// Base Sepolia and Base USDC with their EIP-712 domains (research/x402.md §1.7).
const chains = {
  "base-sepolia": { caip2: "eip155:84532", chainId: 84532, asset: "0x036CbD53842c5426634e7929541eC2318f3dCF7e", name: "USDC" },
  base: { caip2: "eip155:8453", chainId: 8453, asset: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", name: "USD Coin" },
};

function requirementsV1(network, amount) {
  const c = chains[network];
  return {
    scheme: "exact",
    network,
    maxAmountRequired: amount,
    resource: RESOURCE,
    description: "premium data",
    mimeType: "application/json",
    payTo: PAY_TO,
    maxTimeoutSeconds: 60,
    asset: c.asset,
    extra: { name: c.name, version: "2" },
  };
}

function requirementsV2(network, amount) {
  const c = chains[network];
  return {
    scheme: "exact",
    network: c.caip2,
    amount,
    asset: c.asset,
    payTo: PAY_TO,
    maxTimeoutSeconds: 60,
    extra: { name: c.name, version: "2" },
  };
}

function newHTTPClient() {
  const client = new x402Client();
  registerExactEvmScheme(client, { signer: account });
  return new x402HTTPClient(client);
}

const decode = (h) => JSON.parse(Buffer.from(h, "base64").toString("utf8"));

const fixtures = [];

// x402 1.2.0 (x402-fetch 1.2.0's createPaymentHeader), v1.
for (const [network, amount] of [["base-sepolia", "10000"], ["base", "1"]]) {
  const req = requirementsV1(network, amount);
  const header = await createPaymentHeader(account, 1, req);
  fixtures.push({
    name: `x402@1.2.0 v1 ${network}`,
    client: "x402@1.2.0 createPaymentHeader",
    header: "X-PAYMENT",
    version: 1,
    chainId: chains[network].chainId,
    requirements: req,
    value: header,
    payload: decode(header),
  });
}

// @x402/core + @x402/evm 2.27 answering a v2 PAYMENT-REQUIRED header.
for (const [network, amount] of [["base-sepolia", "10000"], ["base", "250000"]]) {
  const req = requirementsV2(network, amount);
  const paymentRequired = {
    x402Version: 2,
    error: "Payment required",
    resource: { url: RESOURCE, description: "premium data", mimeType: "application/json" },
    accepts: [req],
    extensions: {},
  };
  const prHeader = encodePaymentRequiredHeader(paymentRequired);
  const http = newHTTPClient();
  const pr = http.getPaymentRequiredResponse((name) => (name === "PAYMENT-REQUIRED" ? prHeader : null), {});
  const payload = await http.createPaymentPayload(pr);
  const headers = http.encodePaymentSignatureHeader(payload);
  fixtures.push({
    name: `@x402/core@2.27 v2 ${network}`,
    client: "@x402/core x402HTTPClient + @x402/evm registerExactEvmScheme",
    header: "PAYMENT-SIGNATURE",
    version: 2,
    chainId: chains[network].chainId,
    requirements: req,
    paymentRequired: prHeader,
    value: headers["PAYMENT-SIGNATURE"],
    payload: decode(headers["PAYMENT-SIGNATURE"]),
  });
}

// @x402/core + @x402/evm 2.27 answering a v1 402 body (its ExactEvmSchemeV1).
{
  const req = requirementsV1("base-sepolia", "10000");
  const http = newHTTPClient();
  const pr = http.getPaymentRequiredResponse(() => null, { x402Version: 1, error: "X-PAYMENT header is required", accepts: [req] });
  const payload = await http.createPaymentPayload(pr);
  const headers = http.encodePaymentSignatureHeader(payload);
  fixtures.push({
    name: "@x402/core@2.27 v1 base-sepolia",
    client: "@x402/core x402HTTPClient + @x402/evm registerExactEvmScheme (v1 path)",
    header: "X-PAYMENT",
    version: 1,
    chainId: chains["base-sepolia"].chainId,
    requirements: req,
    value: headers["X-PAYMENT"],
    payload: decode(headers["X-PAYMENT"]),
  });
}

// Settlement headers as the SDKs encode them.
const tx = "0x" + "ab".repeat(32);
const settleResponses = [
  {
    name: "x402@1.2.0 X-PAYMENT-RESPONSE success",
    header: "X-PAYMENT-RESPONSE",
    value: settleResponseHeader({ success: true, transaction: tx, network: "base-sepolia", payer: account.address }),
  },
  {
    name: "x402@1.2.0 X-PAYMENT-RESPONSE failure",
    header: "X-PAYMENT-RESPONSE",
    value: settleResponseHeader({ success: false, errorReason: "insufficient_funds", transaction: "", network: "base-sepolia", payer: account.address }),
  },
  {
    name: "@x402/core@2.27 PAYMENT-RESPONSE success",
    header: "PAYMENT-RESPONSE",
    value: encodePaymentResponseHeader({ success: true, transaction: tx, network: "eip155:84532", payer: account.address, amount: "10000" }),
  },
  {
    name: "@x402/core@2.27 PAYMENT-RESPONSE pending",
    header: "PAYMENT-RESPONSE",
    value: encodePaymentResponseHeader({ success: false, errorReason: "settlement_pending", errorMessage: "receipt not yet known", transaction: tx, network: "eip155:84532", payer: account.address }),
  },
];

const out = {
  comment: "Generated by integration/scripts/make-fixtures.mjs; do not edit by hand. The signer is anvil's public development key.",
  signer: account.address,
  payTo: PAY_TO,
  payments: fixtures,
  settleResponses,
};

const here = dirname(fileURLToPath(import.meta.url));
const path = join(here, "..", "..", "x402", "testdata", "fixtures.json");
mkdirSync(dirname(path), { recursive: true });
writeFileSync(path, JSON.stringify(out, null, 2) + "\n");
console.log(`wrote ${fixtures.length} payments and ${settleResponses.length} settle responses to ${path}`);
