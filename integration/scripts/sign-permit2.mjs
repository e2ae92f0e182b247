#!/usr/bin/env node
// sign-permit2.mjs makes PAYMENT-SIGNATURE header values of Permit2 payments with the real
// @x402/evm 2.27 clients, offline: `exact` when the requirement's extra.assetTransferMethod is
// "permit2", and `upto` (whose extra.facilitatorAddress the witness binds).
//
// Input on stdin, JSON: one v2 PaymentRequired {x402Version: 2, resource, accepts: [...]}, as
// a gate's PAYMENT-REQUIRED header holds it, or an array of them; one header is made for each,
// in order, each with its own random Permit2 nonce.
// Environment:
//   X402_PAYER_KEY   the payer's private key, 0x-prefixed hex (required). It is read from the
//                    environment, never from argv, so it stays out of process listings, and it
//                    is never printed.
// Output on stdout: one PAYMENT-SIGNATURE value (base64 JSON) per line.
//
// How: @x402/core's x402HTTPClient, with registerExactEvmScheme and the UptoEvmScheme client
// registered for every EVM chain, reads the PAYMENT-REQUIRED header and builds the payload, as
// @x402/fetch does; the chain id is the requirement's CAIP-2 network. Spend controls allow any
// asset (our test tokens are not the SDK's default assets). viem signs typed data locally.

import { privateKeyToAccount } from "viem/accounts";
import { x402Client } from "@x402/core/client";
import { x402HTTPClient, encodePaymentRequiredHeader } from "@x402/core/http";
import { registerExactEvmScheme } from "@x402/evm/exact/client";
import { UptoEvmScheme } from "@x402/evm/upto/client";

async function readStdin() {
  const chunks = [];
  for await (const chunk of process.stdin) {
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString("utf8");
}

function fail(message) {
  process.stderr.write(`sign-permit2: ${message}\n`);
  process.exit(1);
}

async function main() {
  const key = process.env.X402_PAYER_KEY;
  if (!key || !/^0x[0-9a-fA-F]{64}$/.test(key)) {
    fail("X402_PAYER_KEY must be a 0x-prefixed 32-byte hex key");
  }
  const account = privateKeyToAccount(key);
  let input;
  try {
    input = JSON.parse(await readStdin());
  } catch (e) {
    fail(`stdin is not JSON: ${e.message}`);
  }
  const client = new x402Client();
  client.setSpendControls({ allowedAssets: true });
  registerExactEvmScheme(client, { signer: account });
  client.register("eip155:*", new UptoEvmScheme(account));
  const http = new x402HTTPClient(client);
  const out = [];
  for (const pr of Array.isArray(input) ? input : [input]) {
    const header = encodePaymentRequiredHeader(pr);
    const parsed = http.getPaymentRequiredResponse((name) => (name === "PAYMENT-REQUIRED" ? header : null), {});
    const payload = await http.createPaymentPayload(parsed);
    out.push(http.encodePaymentSignatureHeader(payload)["PAYMENT-SIGNATURE"]);
  }
  process.stdout.write(out.join("\n") + "\n");
}

main().catch((e) => fail(e.message));
