#!/usr/bin/env node
// pay-v1.mjs pays for one HTTP request with the real x402 v1 client, x402-fetch 1.2.0:
// wrapFetchWithPayment makes the request, reads the 402 body, signs an EIP-3009 authorization
// with a viem wallet and retries with an X-PAYMENT header.
//
// Usage: node integration/scripts/pay-v1.mjs <url>
// Environment:
//   X402_PAYER_KEY       the payer's private key, 0x-prefixed hex, or
//   X402_PAYER_KEY_FILE  a file holding it (scripts/run writes .devchain/payer.key).
//                        The key is read from the environment or a file, never from argv, so it
//                        stays out of process listings, and it is never printed.
//   X402_MAX_VALUE       the client's spending cap in base units (default: x402-fetch's own,
//                        100000 = 0.1 USDC; a larger price makes the client refuse to pay).
//   X402_METHOD          the HTTP method (default GET).
//   X402_SIGN_ONLY=1     make the first request and let the client build the X-PAYMENT header,
//                        but do not send the paid retry: the header is printed as paymentHeader
//                        and nothing is paid. Tests use it to replay or tamper a real header.
// Output on stdout, one JSON line:
//   {"status": <HTTP status of the last response>, "body": "<its body as text>",
//    "paymentResponseHeader": "<X-PAYMENT-RESPONSE or null>",
//    "paymentResponse": <that header decoded, or null>}
//   plus "paymentHeader" with X402_SIGN_ONLY=1.
// A failure of the client itself (it refused the requirements, the network failed) exits 1 with
// the reason on stderr.

import { wrapFetchWithPayment, decodeXPaymentResponse } from "x402-fetch";
import { createWalletClient, http, publicActions } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { baseSepolia } from "viem/chains";
import { readFileSync } from "node:fs";

function fail(message) {
  process.stderr.write(`pay-v1: ${message}\n`);
  process.exit(1);
}

function payerKey() {
  let key = process.env.X402_PAYER_KEY;
  if (!key && process.env.X402_PAYER_KEY_FILE) {
    try {
      key = readFileSync(process.env.X402_PAYER_KEY_FILE, "utf8").trim();
    } catch (e) {
      fail(`cannot read X402_PAYER_KEY_FILE: ${e.code ?? "error"}`);
    }
  }
  if (!key || !/^0x[0-9a-fA-F]{64}$/.test(key)) {
    fail("set X402_PAYER_KEY (or X402_PAYER_KEY_FILE) to a 0x-prefixed 32-byte hex private key");
  }
  return key;
}

function decodeResponseHeader(value) {
  if (!value) {
    return null;
  }
  try {
    return decodeXPaymentResponse(value);
  } catch {
    return null;
  }
}

async function main() {
  const url = process.argv[2];
  if (!url) {
    fail("usage: node pay-v1.mjs <url>");
  }
  const signOnly = process.env.X402_SIGN_ONLY === "1";
  // The wallet signs typed data locally; viem never calls the chain's public RPC for that.
  // The chain is Base Sepolia (84532): x402 1.2.0 signs with the chain id of the network name
  // the 402 names, and the local demo chain runs with that id.
  const wallet = createWalletClient({
    account: privateKeyToAccount(payerKey()),
    chain: baseSepolia,
    transport: http(),
  }).extend(publicActions);

  let paymentHeader;
  const recordingFetch = async (input, init) => {
    const sent = init?.headers?.["X-PAYMENT"];
    if (sent !== undefined) {
      paymentHeader = sent;
      if (signOnly) {
        return new Response("", { status: 299 });
      }
    }
    return fetch(input, init);
  };
  const maxValue = process.env.X402_MAX_VALUE ? BigInt(process.env.X402_MAX_VALUE) : undefined;
  const fetchWithPayment = wrapFetchWithPayment(recordingFetch, wallet, maxValue);
  const res = await fetchWithPayment(url, { method: process.env.X402_METHOD || "GET" });

  if (signOnly) {
    if (paymentHeader === undefined) {
      fail(`the client did not build an X-PAYMENT header (status ${res.status})`);
    }
    process.stdout.write(JSON.stringify({ paymentHeader }) + "\n");
    return;
  }
  const responseHeader = res.headers.get("X-PAYMENT-RESPONSE");
  const out = {
    status: res.status,
    body: await res.text(),
    paymentResponseHeader: responseHeader,
    paymentResponse: decodeResponseHeader(responseHeader),
  };
  process.stdout.write(JSON.stringify(out) + "\n");
}

main().catch((e) => fail(e?.message ?? String(e)));
