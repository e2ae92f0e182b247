#!/usr/bin/env node
// compile.mjs compiles x402gate's test contracts with the npm `solc` package (pinned in
// package.json) and writes one artifact per contract, {contractName, compiler, abi, bytecode,
// deployedBytecode}, next to the sources in internal/contracts/.
//
// Usage (from integration/):
//   node scripts/compile.mjs              regenerate the committed artifacts
//   node scripts/compile.mjs --out DIR    write the artifacts to DIR instead (the Go test
//                                         of internal/contracts uses this to check that the
//                                         committed artifacts are up to date)
//
// Settings are fixed so that a build is reproducible: optimizer on (200 runs), evmVersion
// cancun (anvil's default hardfork is newer), and source keys are bare file names, so the
// metadata hash does not depend on where the repository is checked out.

import { readFileSync, writeFileSync, mkdirSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import solc from "solc";

const contractsDir = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "internal", "contracts");
// A contract is named by its file; "File:Contract" names one of several contracts in File.sol.
const contracts = [
  "X402Token", "TestWallet1271", "TestPriceFeed", "TestSanctionsOracle", "GuardedAccount", "PlainToken", "Permit2",
  "X402Permit2Proxies:X402ExactPermit2Proxy", "X402Permit2Proxies:X402UptoPermit2Proxy",
];

// fileAndName splits a contracts entry into its source file's base name and the contract's name.
function fileAndName(entry) {
  const [file, name] = entry.split(":");
  return { file, name: name ?? file };
}

function parseArgs(argv) {
  let out = contractsDir;
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === "--out" && i + 1 < argv.length) {
      out = resolve(argv[++i]);
    } else {
      throw new Error(`unknown argument ${JSON.stringify(argv[i])}; usage: compile.mjs [--out DIR]`);
    }
  }
  return { out };
}

function main() {
  const { out } = parseArgs(process.argv.slice(2));
  const sources = {};
  for (const { file } of contracts.map(fileAndName)) {
    sources[`${file}.sol`] = { content: readFileSync(join(contractsDir, `${file}.sol`), "utf8") };
  }
  const input = {
    language: "Solidity",
    sources,
    settings: {
      optimizer: { enabled: true, runs: 200 },
      evmVersion: "cancun",
      outputSelection: { "*": { "*": ["abi", "evm.bytecode.object", "evm.deployedBytecode.object"] } },
    },
  };
  const output = JSON.parse(solc.compile(JSON.stringify(input)));
  const errors = (output.errors ?? []).filter((e) => e.severity === "error");
  for (const e of output.errors ?? []) {
    process.stderr.write((e.formattedMessage ?? e.message) + "\n");
  }
  if (errors.length > 0) {
    process.exit(1);
  }
  mkdirSync(out, { recursive: true });
  for (const { file, name } of contracts.map(fileAndName)) {
    const c = output.contracts?.[`${file}.sol`]?.[name];
    if (!c || !c.evm?.bytecode?.object) {
      throw new Error(`solc produced no bytecode for ${name}`);
    }
    const artifact = {
      contractName: name,
      compiler: `solc ${solc.version()}`,
      abi: c.abi,
      bytecode: "0x" + c.evm.bytecode.object,
      deployedBytecode: "0x" + c.evm.deployedBytecode.object,
    };
    writeFileSync(join(out, `${name}.json`), JSON.stringify(artifact, null, 2) + "\n");
  }
}

main();
