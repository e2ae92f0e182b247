#!/usr/bin/env node
// sign-x402-fetch.mjs makes an X-PAYMENT header value with the real npm client x402-fetch 1.2.0
// (and the x402 1.2.0 library under it), offline.
//
// Input on stdin, JSON, either
//   - one v1 PaymentRequirements object (scheme "exact", network "base-sepolia",
//     maxAmountRequired, payTo, asset, extra {name, version}, resource, description, mimeType,
//     maxTimeoutSeconds), or
//   - a whole v1 402 body {x402Version, error, accepts: [...]}, e.g. what a gate answered.
// Environment:
//   X402_PAYER_KEY   the payer's private key, 0x-prefixed hex (required). It is read from the
//                    environment, never from argv, so it stays out of process listings, and it
//                    is never printed.
//   X402_NETWORK     the network the signer is created for (default "base-sepolia"; x402 1.2.0
//                    signs with that network's chain id, 84532, and verifyingContract = asset).
//   X402_MAX_VALUE   the client's spending cap in base units (default: x402-fetch's own,
//                    100000 = 0.1 USDC).
// Output on stdout: the X-PAYMENT header value (base64 JSON), one line.
//
// How: wrapFetchWithPayment is given a fetch that answers the first request with the 402 body
// and records the X-PAYMENT header of the retry. So the header comes from x402-fetch's whole
// client path: schema parsing, requirement selection, the spending cap and createPaymentHeader.
// No network access is needed; viem signs typed data locally.

import { wrapFetchWithPayment, createSigner } from "x402-fetch";

async function readStdin() {
  const chunks = [];
  for await (const chunk of process.stdin) {
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString("utf8");
}

function fail(message) {
  process.stderr.write(`sign-x402-fetch: ${message}\n`);
  process.exit(1);
}

async function main() {
  const key = process.env.X402_PAYER_KEY;
  if (!key || !/^0x[0-9a-fA-F]{64}$/.test(key)) {
    fail("X402_PAYER_KEY must be set to a 0x-prefixed 32-byte hex private key");
  }
  const network = process.env.X402_NETWORK || "base-sepolia";
  let input;
  try {
    input = JSON.parse(await readStdin());
  } catch (e) {
    fail(`stdin is not JSON: ${e.message}`);
  }
  const body = Array.isArray(input?.accepts)
    ? input
    : { x402Version: 1, error: "X-PAYMENT header is required", accepts: [input] };

  let header;
  const fakeFetch = async (_input, init) => {
    const sent = init?.headers?.["X-PAYMENT"];
    if (sent === undefined) {
      return new Response(JSON.stringify(body), {
        status: 402,
        headers: { "Content-Type": "application/json" },
      });
    }
    header = sent;
    return new Response("{}", { status: 200, headers: { "Content-Type": "application/json" } });
  };

  const signer = await createSigner(network, key);
  const maxValue = process.env.X402_MAX_VALUE ? BigInt(process.env.X402_MAX_VALUE) : undefined;
  const fetchWithPayment = wrapFetchWithPayment(fakeFetch, signer, maxValue);
  const resource = body.accepts[0]?.resource || "http://127.0.0.1/";
  const res = await fetchWithPayment(resource, { method: "GET" });
  if (res.status !== 200 || header === undefined) {
    fail(`x402-fetch did not retry with an X-PAYMENT header (status ${res.status})`);
  }
  process.stdout.write(header + "\n");
}

main().catch((e) => fail(e?.message ?? String(e)));
