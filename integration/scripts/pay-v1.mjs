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
//   X402_PASS            an access pass an earlier answer printed ("pass"): sent as X-402-PASS,
//                        so the request comes in on the pass without paying.
//   X402_SIGN_ONLY=1     make the first request and let the client build the X-PAYMENT header,
//                        but do not send the paid retry: the header is printed as paymentHeader
//                        and nothing is paid. Tests use it to replay or tamper a real header.
// Output on stdout, one JSON line:
//   {"status": <HTTP status of the last response>, "body": "<its body as text>",
//    "paymentResponseHeader": "<X-PAYMENT-RESPONSE or null>",
//    "paymentResponse": <that header decoded, or null>}
//   plus "pass" and "passExpires" when the answer carries an access pass (X-402-PASS),
//   and "paymentHeader" alone with X402_SIGN_ONLY=1.
// A failure of the client itself (it refused the requirements, the network failed) exits 1 with
// the reason on stderr.

import { wrapFetchWithPayment, decodeXPaymentResponse } from "x402-fetch";
import { createWalletClient, http, publicActions } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { baseSepolia } from "viem/chains";
import { payScript } from "./pay-common.mjs";

const { payerKey, url, requestHeaders, recorder, report, run } = payScript("pay-v1");

async function main() {
  const target = url();
  // The wallet signs typed data locally; viem never calls the chain's public RPC for that.
  // The chain is Base Sepolia (84532): x402 1.2.0 signs with the chain id of the network name
  // the 402 names, and the local demo chain runs with that id.
  const wallet = createWalletClient({
    account: privateKeyToAccount(payerKey()),
    chain: baseSepolia,
    transport: http(),
  }).extend(publicActions);

  // x402-fetch calls fetch(input, init) with the headers as a plain object.
  const { recordingFetch, sentHeader } = recorder((input, init) => init?.headers?.["X-PAYMENT"]);
  const maxValue = process.env.X402_MAX_VALUE ? BigInt(process.env.X402_MAX_VALUE) : undefined;
  const fetchWithPayment = wrapFetchWithPayment(recordingFetch, wallet, maxValue);
  const res = await fetchWithPayment(target, { method: process.env.X402_METHOD || "GET", headers: requestHeaders() });

  await report(
    res,
    sentHeader(),
    "an X-PAYMENT header",
    res.headers.get("X-PAYMENT-RESPONSE"),
    decodeXPaymentResponse,
  );
}

run(main);
