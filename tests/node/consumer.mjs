// Runs recipes/node/cmstoken.mjs against a local stack for tests/integration/consumer/test_node.py:
//
//   node consumer.mjs SCENARIO
//
// SECRET_ID names the secret; PROVIDER_OPTIONS (JSON) are the provider's options; CLOCK_OFFSET
// (seconds) is added to the real time, so that the module's clock is the emulator's (whose
// time a test moves forward); CALLERS is how many calls run at once. The module's log lines go
// to standard output and error as they would in Lambda. With PAUSE=1, listProjects prints
// {"ready": fingerprint} once it holds a token and waits for a line on standard input (the test
// changes the stack meanwhile). The last line of standard output is
// the outcome, as JSON: {"ok": true, ...} or {"ok": false, "reason", "message", "retryAt"}.
// Secrets Manager calls are counted (`calls`) through a client of the recipe's own SDK.

import { createRequire } from "node:module";
import {
  ConsumerError,
  ServiceTokenProvider,
  fingerprint,
  systemClock,
} from "../../recipes/node/cmstoken.mjs";

const sdk = createRequire(new URL("../../recipes/node/package.json", import.meta.url));
const { SecretsManagerClient } = sdk("@aws-sdk/client-secrets-manager");

const calls = {};
const secretsClient = new SecretsManagerClient({});
const send = secretsClient.send.bind(secretsClient);
secretsClient.send = (command, ...rest) => {
  const name = command.constructor.name.replace(/Command$/, "");
  calls[name] = (calls[name] ?? 0) + 1;
  return send(command, ...rest);
};
const offset = Number(process.env.CLOCK_OFFSET ?? 0);
const provider = new ServiceTokenProvider(process.env.SECRET_ID, {
  clock: { now: () => systemClock.now() + offset, sleep: systemClock.sleep },
  logger: console,
  secretsClient,
  ...JSON.parse(process.env.PROVIDER_OPTIONS ?? "{}"),
});
const callers = Number(process.env.CALLERS ?? 1);

/** The project listing, `callers` times at once, through the provider's fetch. */
async function listProjects() {
  const url = `${await provider.apiUrl()}/v3/projects`;
  const before = await provider.token();
  if (process.env.PAUSE === "1") {
    console.log(JSON.stringify({ ready: fingerprint(before) }));
    await new Promise((resolve) => process.stdin.once("data", resolve));
    process.stdin.destroy();
  }
  const answers = await Promise.all(
    Array.from({ length: callers }, async () => {
      const response = await provider.fetch(url);
      return { status: response.status, body: await response.json() };
    }),
  );
  const document = await provider.document();
  return {
    before: fingerprint(before),
    after: fingerprint(document.token),
    apiUrl: document.apiUrl,
    printed: JSON.stringify(document), // what a log line of the document would show
    answers,
  };
}

const scenarios = {
  listProjects,
  /** A refusal of the cached token, `callers` times at once (provider.refused). */
  async refused() {
    const token = await provider.token();
    const replacements = await Promise.all(
      Array.from({ length: callers }, () => provider.refused(token)),
    );
    return { before: fingerprint(token), after: replacements.map(fingerprint) };
  },
};

let outcome;
try {
  outcome = { ok: true, ...(await scenarios[process.argv[2]]()) };
} catch (error) {
  if (!(error instanceof ConsumerError)) throw error;
  outcome = { ok: false, reason: error.reason, message: error.message, retryAt: error.retryAt };
}
console.log(JSON.stringify({ ...outcome, calls }));
