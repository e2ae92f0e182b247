// pay-common.mjs holds what pay-v1.mjs and pay-v2.mjs share: failing with a reason on stderr,
// the command line, the payer's key, the X402_SIGN_ONLY switch, the fetch that records the
// payment header the client sends, and the one JSON line each prints. Only the x402 client each
// wraps differs; see those scripts for the environment they read and the output they print.

import { readFileSync } from "node:fs";

/**
 * payScript sets up one pay script named name: fail(message) writes "<name>: message" to
 * stderr and exits 1; the rest is as described on each function below.
 */
export function payScript(name) {
  function fail(message) {
    process.stderr.write(`${name}: ${message}\n`);
    process.exit(1);
  }

  // payerKey reads the payer's private key from X402_PAYER_KEY, else from the file named by
  // X402_PAYER_KEY_FILE. The key is never taken from argv (it would show in process listings)
  // and never printed: the errors name the variables, not the value.
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

  // url returns the one argument, the URL to pay for, or fails with the usage.
  function url() {
    const u = process.argv[2];
    if (!u) {
      fail(`usage: node ${name}.mjs <url>`);
    }
    return u;
  }

  const signOnly = process.env.X402_SIGN_ONLY === "1";

  // requestHeaders returns the headers the script's own request carries: X-402-PASS with
  // X402_PASS (a pass an earlier paid answer printed), so a client comes back on it without
  // paying. The pass is a bearer secret of the payer: it is never printed on stderr.
  function requestHeaders() {
    const pass = process.env.X402_PASS;
    if (pass === undefined || pass === "") {
      return {};
    }
    if (!/^[A-Za-z0-9._~-]+$/.test(pass)) {
      fail("X402_PASS must be the pass an earlier answer printed (\"pass\")");
    }
    return { "X-402-PASS": pass };
  }

  // recorder returns a fetch for the x402 client to call, and sentHeader() giving the payment
  // header the client last sent, or undefined. sentBy(args) returns the payment header the
  // client put on that call (undefined or null when none). With X402_SIGN_ONLY=1 a call that
  // carries the header is not sent: it answers status 299 so nothing is paid.
  function recorder(sentBy) {
    let paymentHeader;
    const recordingFetch = async (...args) => {
      const sent = sentBy(...args);
      if (sent !== undefined && sent !== null) {
        paymentHeader = sent;
        if (signOnly) {
          return new Response("", { status: 299 });
        }
      }
      return fetch(...args);
    };
    return { recordingFetch, sentHeader: () => paymentHeader };
  }

  // report prints the one JSON line for res, the client's last response. With X402_SIGN_ONLY=1
  // that is {"paymentHeader"}, and a client that built none fails, naming the header it should
  // have built in header (such as "an X-PAYMENT header"). Otherwise it
  // is {"status", "body", "paymentResponseHeader", "paymentResponse"}: responseHeader is the
  // settlement header's raw value (or null) and decode(value) decodes it; a value decode
  // rejects gives paymentResponse null. An answer that carries an access pass adds "pass"
  // (X-402-PASS, to send back with X402_PASS) and "passExpires" (X-402-PASS-EXPIRES, RFC 3339).
  async function report(res, paymentHeader, header, responseHeader, decode) {
    if (signOnly) {
      if (paymentHeader === undefined) {
        fail(`the client did not build ${header} (status ${res.status})`);
      }
      process.stdout.write(JSON.stringify({ paymentHeader }) + "\n");
      return;
    }
    const out = {
      status: res.status,
      body: await res.text(),
      paymentResponseHeader: responseHeader,
      paymentResponse: decodeOrNull(decode, responseHeader),
    };
    const pass = res.headers.get("X-402-PASS");
    if (pass) {
      out.pass = pass;
      out.passExpires = res.headers.get("X-402-PASS-EXPIRES");
    }
    process.stdout.write(JSON.stringify(out) + "\n");
  }

  // run runs main and turns anything it throws into a failure.
  function run(main) {
    main().catch((e) => fail(e?.message ?? String(e)));
  }

  return { fail, payerKey, url, signOnly, requestHeaders, recorder, report, run };
}

function decodeOrNull(decode, value) {
  if (!value) {
    return null;
  }
  try {
    return decode(value);
  } catch {
    return null;
  }
}
