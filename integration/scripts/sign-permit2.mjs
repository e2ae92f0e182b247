#!/usr/bin/env node
// sign-permit2.mjs makes PAYMENT-SIGNATURE header values of Permit2 payments with the real
// @x402/evm 2.27 clients, offline: `exact` when the requirement's extra.assetTransferMethod is
// "permit2", and `upto` (whose extra.facilitatorAddress the witness binds).
//
// Input on stdin, JSON: one v2 PaymentRequired {x402Version: 2, resource, accepts: [...]}, as
// a gate's PAYMENT-REQUIRED header holds it, or an array of them; one header is made for each,
// in order, each with its own random Permit2 nonce.
// Environment:
//   X402_PAYER_KEY   the payer's private key, 0x-prefixed hex (required; or X402_PAYER_KEY_FILE).
//                    It is read from the environment, never from argv, so it stays out of
//                    process listings, and it is never printed.
// Output on stdout: one PAYMENT-SIGNATURE value (base64 JSON) per line.
//
// How: permit2-client.mjs's permit2Payer, the client path of @x402/fetch; the chain id is the
// requirement's CAIP-2 network.

import { privateKeyToAccount } from "viem/accounts";

import { payScript } from "./pay-common.mjs";
import { permit2Payer, readStdin } from "./permit2-client.mjs";

const { fail, payerKey, run } = payScript("sign-permit2");

run(async () => {
  const pay = permit2Payer(privateKeyToAccount(payerKey()));
  let input;
  try {
    input = JSON.parse(await readStdin());
  } catch (e) {
    fail(`stdin is not JSON: ${e.message}`);
  }
  const out = [];
  for (const pr of Array.isArray(input) ? input : [input]) {
    out.push(await pay(pr));
  }
  process.stdout.write(out.join("\n") + "\n");
});
