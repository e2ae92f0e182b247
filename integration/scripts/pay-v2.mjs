#!/usr/bin/env node
// pay-v2.mjs pays for one HTTP request with the real x402 v2 client, @x402/fetch 2.27 with
// @x402/evm's ExactEvmScheme and UptoEvmScheme: the client reads the PAYMENT-REQUIRED header of
// the 402, signs an EIP-3009 authorization (exact), a Permit2 one (exact with
// extra.assetTransferMethod "permit2", and upto) with a viem account and retries with a
// PAYMENT-SIGNATURE header.
//
// Usage: node integration/scripts/pay-v2.mjs <url>
// Environment:
//   X402_PAYER_KEY       the payer's private key, 0x-prefixed hex, or
//   X402_PAYER_KEY_FILE  a file holding it (scripts/run writes .devchain/payer.key).
//                        Never taken from argv, never printed.
//   X402_NETWORK         the CAIP-2 network the scheme is registered for (default eip155:84532).
//   X402_TOKEN           the token the client may pay with. @x402/fetch 2.27 pays only with a
//                        network's default asset (real USDC) unless spend controls allow more;
//                        the local chain's token is not a default asset, so it is listed here
//                        (spendControls.allowedAssets). Unset: allowedAssets true (any asset).
//   X402_MAX_VALUE       per-payment cap in base units for X402_TOKEN (default: uncapped).
//   X402_METHOD          the HTTP method (default GET).
//   X402_PASS            an access pass an earlier answer printed ("pass"): sent as X-402-PASS,
//                        so the request comes in on the pass without paying.
//   X402_PAYMENT_ID      a payment-identifier id: when the 402 declares the extension, the
//                        client writes it with @x402/extensions' appendPaymentIdentifierToExtensions
//                        in an onBeforePaymentCreation hook, as that package documents.
//   X402_SIGN_ONLY=1     build the PAYMENT-SIGNATURE header but do not send the paid retry: the
//                        header is printed as paymentHeader and nothing is paid.
//   X402_SIWX=1          register @x402/extensions' sign-in-with-x client extension: when the 402
//                        offers the challenge, the client signs it with the payer's key and retries
//                        with SIGN-IN-WITH-X before it pays (a wallet that holds a pass gets in).
// Output on stdout, one JSON line: {"status", "body", "paymentResponseHeader" (PAYMENT-RESPONSE,
// else X-PAYMENT-RESPONSE, or null), "paymentResponse" (decoded, or null)}, or with
// X402_SIGN_ONLY=1 {"paymentHeader"}; "pass" and "passExpires" are added when the answer
// carries an access pass (X-402-PASS). A failure of the client itself exits 1, reason on stderr.

import { wrapFetchWithPayment, x402Client, decodePaymentResponseHeader } from "@x402/fetch";
import { appendPaymentIdentifierToExtensions } from "@x402/extensions/payment-identifier";
import { createSIWxClientExtension } from "@x402/extensions/sign-in-with-x";
import { ExactEvmScheme } from "@x402/evm";
import { UptoEvmScheme } from "@x402/evm/upto/client";
import { privateKeyToAccount } from "viem/accounts";
import { payScript } from "./pay-common.mjs";

const { fail, payerKey, url, requestHeaders, recorder, report, run } = payScript("pay-v2");

async function main() {
  const target = url();
  const network = process.env.X402_NETWORK || "eip155:84532";
  const token = process.env.X402_TOKEN;
  if (token !== undefined && !/^0x[0-9a-fA-F]{40}$/.test(token)) {
    fail("X402_TOKEN must be a 0x-prefixed 20-byte hex address");
  }
  const asset = { network, asset: token };
  if (process.env.X402_MAX_VALUE) {
    asset.maxAmountPerPayment = process.env.X402_MAX_VALUE;
  }
  const spendControls = { allowedAssets: token ? [asset] : true };

  // @x402/fetch calls fetch(request) with one Request.
  const { recordingFetch, sentHeader } = recorder((request) => request.headers.get("PAYMENT-SIGNATURE"));
  const account = privateKeyToAccount(payerKey());
  const client = x402Client.fromConfig({
    schemes: [{ network, client: new ExactEvmScheme(account) }, { network, client: new UptoEvmScheme(account) }],
    spendControls,
  });
  if (process.env.X402_SIWX === "1") {
    client.registerExtension(createSIWxClientExtension({ signers: [account] }));
  }
  const paymentId = process.env.X402_PAYMENT_ID;
  if (paymentId) {
    client.onBeforePaymentCreation(async ({ paymentRequired }) => {
      if (paymentRequired.extensions) {
        appendPaymentIdentifierToExtensions(paymentRequired.extensions, paymentId);
      }
    });
  }
  const fetchWithPayment = wrapFetchWithPayment(recordingFetch, client);
  const res = await fetchWithPayment(target, { method: process.env.X402_METHOD || "GET", headers: requestHeaders() });

  await report(
    res,
    sentHeader(),
    "a PAYMENT-SIGNATURE header",
    res.headers.get("PAYMENT-RESPONSE") ?? res.headers.get("X-PAYMENT-RESPONSE"),
    decodePaymentResponseHeader,
  );
}

run(main);
