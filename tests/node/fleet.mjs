// A fleet of ServiceTokenProvider instances (the real recipes/node/cmstoken.mjs) on a simulated
// clock, with fake Secrets Manager, EventBridge and API answers that count the calls: at a
// rotation, and when the API refuses the published token at once for every instance. Prints
// the figures as JSON (tests/integration/consumer/test_node_fleet.py reads and bounds them).
//
// usage: node fleet.mjs [instances]
//
// Every instance serves one invocation a second (its own phase in the second) and asks for the
// token at each. The simulation does not run the invocations that are cache hits: an instance's
// next call is its first invocation at or after the provider's `freshUntil` (a hit reads
// nothing and changes nothing), which makes 10,000 instances over hours cheap and exact.

import { ServiceTokenProvider } from "../../recipes/node/cmstoken.mjs";

const INSTANCES = Number(process.argv[2] ?? 10000);
const ARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:cmstoken/service-token-AbCdEf";
const API = "https://api.example.com/api";
const HOUR = 3600;
const WARM_UP = 900; // the instances start (cold) within this, before the event
const READ_LATENCY = 0.02; // seconds a GetSecretValue takes
const PUT_LATENCY = 0.03; // seconds a PutEvents takes
const ROTATOR_DELAY = 5; // the rotator publishes this long after the first request arrives
// The old Python helper: cached until exactly expiry - 60 s, re-read at once on a 401, polled
// every 5 s. With random() = 0 the module's bounds are exactly those.
const OLD = {
  maxAgeSeconds: Infinity,
  refusedSpreadSeconds: 0,
  pollIntervalSeconds: 10,
  random: () => 0,
};

/** A small seeded generator (mulberry32), so that every run gives the same figures. */
function generator(seed) {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Simulated time: sleep() resolves when the simulation reaches its time. */
class Clock {
  constructor(start) {
    this.time = start;
    this.heap = [];
    this.order = 0;
  }
  now() {
    return this.time;
  }
  sleep(seconds) {
    return new Promise((resolve) => this.at(this.time + Math.max(0, seconds), resolve));
  }
  at(time, action) {
    const heap = this.heap;
    heap.push({ time, order: this.order++, action });
    for (let i = heap.length - 1; i > 0;) {
      const parent = (i - 1) >> 1;
      if (!before(heap[i], heap[parent])) break;
      [heap[i], heap[parent]] = [heap[parent], heap[i]];
      i = parent;
    }
  }
  #pop() {
    const heap = this.heap;
    const top = heap[0];
    const last = heap.pop();
    if (heap.length) {
      heap[0] = last;
      for (let i = 0; ;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < heap.length && before(heap[l], heap[m])) m = l;
        if (r < heap.length && before(heap[r], heap[m])) m = r;
        if (m === i) break;
        [heap[i], heap[m]] = [heap[m], heap[i]];
        i = m;
      }
    }
    return top;
  }
  /** Run every timer up to `until`, letting each one's promise chains settle before the next. */
  async run(until) {
    while (this.heap.length && this.heap[0].time <= until) {
      const next = this.#pop();
      this.time = Math.max(this.time, next.time);
      next.action();
      await new Promise((resolve) => setImmediate(resolve));
    }
    this.time = until;
  }
}

function before(a, b) {
  return a.time < b.time || (a.time === b.time && a.order < b.order);
}

function iso(seconds) {
  return new Date(Math.floor(seconds) * 1000).toISOString().replace(/\.\d{3}Z$/, "Z");
}

/** The published secret, and every call made to AWS and to the API, counted. */
class World {
  constructor(clock) {
    this.clock = clock;
    this.secret = null;
    this.refused = new Set(); // tokens the API answers with 401
    this.reads = new Map(); // whole second -> GetSecretValue calls
    this.requests = []; // when each PutEvents arrived
    this.rotations = 0;
    this.onRequest = () => {};
  }
  publish(token, expiresAt, refreshedAt) {
    this.secret = JSON.stringify({
      schema_version: 1,
      token,
      token_type: "Bearer",
      expires_at: iso(expiresAt),
      api_url: API,
      issued_at: iso(refreshedAt),
      refreshed_at: iso(refreshedAt),
      credential_status: "active",
      min_refresh_interval_seconds: 600,
    });
    this.token = token;
  }
  secretsClient(onAnswer) {
    return {
      send: async (command) => {
        if (command.constructor.name !== "GetSecretValueCommand")
          throw new Error(command.constructor.name);
        const second = Math.floor(this.clock.now());
        this.reads.set(second, (this.reads.get(second) ?? 0) + 1);
        await this.clock.sleep(READ_LATENCY);
        onAnswer(this.token);
        return { SecretString: this.secret, VersionId: "v" };
      },
    };
  }
  eventsClient() {
    return {
      send: async (command) => {
        if (command.constructor.name !== "PutEventsCommand")
          throw new Error(command.constructor.name);
        this.requests.push(this.clock.now());
        if (this.requests.length === 1) this.onRequest();
        await this.clock.sleep(PUT_LATENCY);
        return { FailedEntryCount: 0, Entries: [{ EventId: `event-${this.requests.length}` }] };
      },
    };
  }
  /** The API: 401 for a refused token, 200 otherwise (an answer without a body: all the
   * module reads of it is the status). */
  fetch = async (input, init) => {
    const token = init.headers.get("authorization").slice("Bearer ".length);
    return { status: this.refused.has(token) ? 401 : 200, body: null };
  };
  peak(from, to) {
    let peak = 0;
    let at = null;
    for (const [second, count] of this.reads) {
      if (second >= from && second < to && count > peak) [peak, at] = [count, second];
    }
    return { peak, at };
  }
  total(from, to) {
    let total = 0;
    for (const [second, count] of this.reads) if (second >= from && second < to) total += count;
    return total;
  }
}

/** An instance: one provider, invoked once a second at its own phase; `call` runs at the first
 * invocation at or after the provider's freshUntil. */
class Instance {
  constructor(index, world, clock, options) {
    const random = generator(index * 2654435761 + 1);
    this.phase = random();
    this.pickedUp = null;
    this.generation = 0;
    this.world = world;
    this.clock = clock;
    this.provider = new ServiceTokenProvider(ARN, {
      clock,
      random,
      logger: { info() {}, warn() {} },
      secretsClient: world.secretsClient((token) => {
        if (token === world.newToken && this.pickedUp === null) this.pickedUp = clock.now();
      }),
      eventsClient: world.eventsClient(),
      ...options,
    });
  }
  /** The first invocation at or after `time`. */
  invocation(time) {
    return Math.ceil(time - this.phase) + this.phase;
  }
  schedule(time) {
    const generation = ++this.generation;
    this.clock.at(this.invocation(time), () => {
      if (generation === this.generation) this.call();
    });
  }
  async call() {
    await this.provider.token();
    const now = this.clock.now();
    this.schedule(Math.max(now + 1, this.provider.freshUntil));
  }
}

async function fleet(options, scenario) {
  const t0 = 1_800_000_000;
  const clock = new Clock(t0);
  const world = new World(clock);
  globalThis.fetch = world.fetch;
  const instances = Array.from(
    { length: INSTANCES },
    (_, i) => new Instance(i, world, clock, options),
  );
  // The fleet scaled out over a quarter of an hour: each instance's first invocation (a cold start).
  const starts = generator(7);
  for (const instance of instances) instance.schedule(t0 + starts() * WARM_UP);
  return scenario(t0, clock, world, instances);
}

/** The stack rotates: the new token is published 6 h before the old one expires. */
async function rotation(options) {
  return fleet(options, async (t0, clock, world, instances) => {
    const published = t0 + 2 * WARM_UP;
    const oldExpiry = published + 6 * HOUR;
    world.publish("old-token-rotation", oldExpiry, t0 - 18 * HOUR);
    world.newToken = "new-token-rotation";
    await clock.run(published);
    world.publish(world.newToken, published + 24 * HOUR, published);
    // Until every instance has the new token (and for at least 20 minutes), at most until the
    // old token has expired.
    let end = published + 1200;
    await clock.run(end);
    while (instances.some((i) => i.pickedUp === null) && end < oldExpiry + 60) {
      end += 60;
      await clock.run(end);
    }
    const delays = instances.map((i) => (i.pickedUp === null ? Infinity : i.pickedUp - published));
    const reads = world.peak(t0 + WARM_UP, end);
    return {
      instances: instances.length,
      max_pickup_seconds: round(Math.max(...delays)),
      median_pickup_seconds: round(delays.sort((a, b) => a - b)[delays.length >> 1]),
      peak_reads_per_second: reads.peak,
      peak_at_seconds_after_publication: reads.at - Math.floor(published),
      reads_per_hour: Math.round((world.total(t0 + WARM_UP, end) / (end - t0 - WARM_UP)) * HOUR),
      simulated_seconds_after_publication: end - published,
      refresh_requests: world.requests.length,
    };
  });
}

/** The API refuses the published token for every instance in the same second; the rotator
 * publishes a new one ROTATOR_DELAY s after the first refresh request arrives. */
async function refusal(options) {
  return fleet(options, async (t0, clock, world, instances) => {
    const refusedAt = t0 + WARM_UP + 60; // every instance has started and holds the token
    world.publish("refused-token", t0 + 20 * HOUR, t0 - 4 * HOUR);
    world.newToken = "new-token-refusal";
    world.onRequest = () =>
      clock.at(clock.now() + ROTATOR_DELAY, () =>
        world.publish(world.newToken, clock.now() + 24 * HOUR, clock.now()),
      );
    await clock.run(refusedAt);
    world.refused.add("refused-token");
    const outcomes = new Map();
    let lastDone = refusedAt;
    for (const instance of instances) {
      clock.at(instance.invocation(refusedAt), async () => {
        let outcome;
        try {
          outcome = String((await instance.provider.fetch(`${API}/v3/projects`)).status);
        } catch (error) {
          outcome = error.reason ?? String(error);
        }
        outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1);
        lastDone = Math.max(lastDone, clock.now());
        instance.schedule(Math.max(clock.now() + 1, instance.provider.freshUntil));
      });
    }
    await clock.run(refusedAt + 120);
    const reads = world.peak(refusedAt, refusedAt + 120);
    return {
      instances: instances.length,
      refresh_requests: world.requests.length,
      requests_after_publication: world.requests.filter(
        (t) => t >= world.requests[0] + ROTATOR_DELAY,
      ).length,
      peak_reads_per_second: reads.peak,
      peak_at_seconds_after_refusal: reads.at - Math.floor(refusedAt),
      reads_in_the_first_minute: world.total(refusedAt, refusedAt + 60),
      outcomes: Object.fromEntries(outcomes),
      all_done_seconds_after_refusal: round(lastDone - refusedAt),
    };
  });
}

function round(value) {
  return Number.isFinite(value) ? Math.round(value * 10) / 10 : null;
}

const started = Date.now();
const figures = {
  rotation: { jitter: await rotation({}), old: await rotation(OLD) },
  refusal: { jitter: await refusal({}), old: await refusal(OLD) },
  elapsed_seconds: (Date.now() - started) / 1000,
};
console.log(JSON.stringify(figures, null, 2));
