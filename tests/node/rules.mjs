// The module's cache and 403 rules on a fake clock with fake Secrets Manager and API answers,
// for tests/integration/consumer/test_node_rules.py: each check prints what the module did as
// one JSON object (reads counted, times in seconds from the start).

import { ServiceTokenProvider } from "../../recipes/node/cmstoken.mjs";

const ARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:cmstoken/service-token-AbCdEf";
const T0 = 1_800_000_000;
const quiet = { info() {}, warn() {} };

function iso(seconds) {
  return new Date(Math.floor(seconds) * 1000).toISOString().replace(/\.\d{3}Z$/, "Z");
}

/** A clock that only moves when the module sleeps on it or a check moves it. */
class Clock {
  time = T0;
  now = () => this.time;
  sleep = async (seconds) => {
    this.time += Math.max(0, seconds);
  };
}

/** Secrets Manager holding `token` (expiring at `expiresAt`), or failing while `failing`. */
class Secret {
  reads = [];
  failing = false;
  constructor(clock, token, expiresAt) {
    this.clock = clock;
    this.publish(token, expiresAt);
  }
  publish(token, expiresAt) {
    this.text = JSON.stringify({
      schema_version: 1,
      token,
      token_type: "Bearer",
      expires_at: iso(expiresAt),
      api_url: "https://api.example.com/api",
      refreshed_at: iso(T0 - 3600),
      credential_status: "active",
    });
  }
  send = async (command) => {
    this.reads.push(this.clock.now() - T0);
    if (this.failing) {
      const error = new Error("Rate exceeded");
      error.name = "ThrottlingException";
      error.$metadata = { httpStatusCode: 400 };
      throw error;
    }
    return { SecretString: this.text };
  };
}

function provider(clock, secret, options = {}) {
  return new ServiceTokenProvider(ARN, {
    clock,
    secretsClient: secret,
    eventsClient: { send: async () => ({ FailedEntryCount: 0, Entries: [{ EventId: "e" }] }) },
    logger: quiet,
    ...options,
  });
}

const checks = {
  /** freshUntil with random() = 0 and random() close to 1, for a token far from expiry and
   * for one expiring within minValiditySeconds * (1 + u). */
  async bounds() {
    const result = {};
    for (const [name, u] of [
      ["low", 0],
      ["high", 0.999999],
    ]) {
      const clock = new Clock();
      const far = provider(clock, new Secret(clock, "far", T0 + 86400), { random: () => u });
      await far.token();
      const near = provider(clock, new Secret(clock, "near", T0 + 100), { random: () => u });
      await near.token();
      const soon = provider(clock, new Secret(clock, "soon", T0 + 30), { random: () => u });
      await soon.token();
      result[name] = {
        far: far.freshUntil - T0,
        near: near.freshUntil - T0,
        soon: soon.freshUntil - T0,
      };
    }
    return result;
  },

  /** Reads fail while the cached token is valid: it is served, the reads back off. */
  async backOff() {
    const clock = new Clock();
    const secret = new Secret(clock, "cached", T0 + 4000);
    const p = provider(clock, secret, { random: () => 0 });
    await p.token();
    secret.failing = true;
    const served = [];
    clock.time = p.freshUntil;
    for (let i = 0; i < 8; i++) {
      served.push(await p.token());
      clock.time = p.freshUntil;
    }
    secret.failing = false;
    clock.time = T0 + 3999;
    const last = await p.token();
    clock.time = T0 + 4000;
    let afterExpiry = "served";
    secret.failing = true;
    try {
      await p.token();
    } catch (error) {
      afterExpiry = error.reason;
    }
    return { reads: secret.reads, served: [...new Set(served)], last, afterExpiry };
  },

  /** A 403: no re-read within 5 s of the last one; after that one re-read, and the request is
   * retried only when the token changed. */
  async forbidden() {
    const clock = new Clock();
    const secret = new Secret(clock, "first", T0 + 86400);
    const p = provider(clock, secret);
    const seen = [];
    globalThis.fetch = async (input, init) => {
      const token = init.headers.get("authorization").slice("Bearer ".length);
      seen.push(token);
      return { status: token === "second" ? 200 : 403, body: null };
    };
    const statuses = [];
    statuses.push((await p.fetch("https://api.example.com/api/v3/projects")).status);
    clock.time += 6;
    statuses.push((await p.fetch("https://api.example.com/api/v3/projects")).status);
    secret.publish("second", T0 + 86400);
    clock.time += 6;
    statuses.push((await p.fetch("https://api.example.com/api/v3/projects")).status);
    return { statuses, seen, reads: secret.reads };
  },
};

const results = {};
for (const [name, check] of Object.entries(checks)) results[name] = await check();
console.log(JSON.stringify(results));
