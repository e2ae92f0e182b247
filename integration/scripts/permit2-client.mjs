// permit2-client.mjs holds what sign-permit2.mjs and make-permit2-fixtures.mjs share: the
// real @x402/evm 2.27 client of Permit2 payments, and reading stdin.

import { x402Client } from "@x402/core/client";
import { x402HTTPClient, encodePaymentRequiredHeader } from "@x402/core/http";
import { registerExactEvmScheme } from "@x402/evm/exact/client";
import { UptoEvmScheme } from "@x402/evm/upto/client";

/**
 * permit2Payer returns pay(paymentRequired): the PAYMENT-SIGNATURE value with which
 * account pays a v2 PaymentRequired, made by @x402/core's x402HTTPClient with
 * registerExactEvmScheme and the UptoEvmScheme client registered for every EVM chain, as
 * @x402/fetch does: `exact` over Permit2 for extra.assetTransferMethod "permit2", `upto` for
 * scheme upto. Spend controls allow any asset (our test tokens are not the SDK's default
 * assets). viem signs typed data locally; nothing goes to the network.
 */
export function permit2Payer(account) {
  const client = new x402Client();
  client.setSpendControls({ allowedAssets: true });
  registerExactEvmScheme(client, { signer: account });
  client.register("eip155:*", new UptoEvmScheme(account));
  const http = new x402HTTPClient(client);
  return async (paymentRequired) => {
    const header = encodePaymentRequiredHeader(paymentRequired);
    const parsed = http.getPaymentRequiredResponse((name) => (name === "PAYMENT-REQUIRED" ? header : null), {});
    const payload = await http.createPaymentPayload(parsed);
    return http.encodePaymentSignatureHeader(payload)["PAYMENT-SIGNATURE"];
  };
}

/** readStdin returns all of standard input as UTF-8 text. */
export async function readStdin() {
  const chunks = [];
  for await (const chunk of process.stdin) {
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString("utf8");
}
