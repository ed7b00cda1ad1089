// cmstoken.mjs: the cmstoken service token in a Node.js Lambda function, or any Node.js 20+
// process. Copy this file next to your code and `npm install` the two AWS SDK clients that
// package.json pins (@aws-sdk/client-secrets-manager, @aws-sdk/client-eventbridge).
//
// It does what the Python helper (cmstoken.consumer) does, by the same rules:
// - reads the service token secret (GetSecretValue) and caches the document, once per process;
//   each read stays fresh for a random time between half and all of maxAgeSeconds (so a new
//   token is picked up within maxAgeSeconds of its publication), and never later than
//   minValiditySeconds to twice that before the token expires (so that a fleet does not re-read
//   at one instant); a failed read while the cached token is valid serves the cached token and
//   backs off (1, 2, 4 ... 30 s);
// - on a 401, re-reads the secret (after a random pause of up to refusedSpreadSeconds, so that a
//   fleet refused at once does not re-read at once) and uses a different token at once; when the
//   secret still holds the refused token, sends one "Service Token Refresh Requested" event and
//   polls the secret until a different token comes, one request and one wait at a time per
//   process, shared by every caller refused meanwhile; it says at once, instead of asking, when
//   the rotator would skip the request (refreshed within min_refresh_interval_seconds) or when
//   the stack needs reauthorization;
// - on a 403, re-reads the secret (at most every 5 s) and retries only when the token changed.
// Errors are ConsumerError, with a `reason` like the Python helper's. No token is ever put in an
// error message or a log line: they name a token by its fingerprint (12 hex digits of SHA-256).

import { createHash } from "node:crypto";
import {
  DescribeSecretCommand,
  GetSecretValueCommand,
  SecretsManagerClient,
} from "@aws-sdk/client-secrets-manager";
import { EventBridgeClient, PutEventsCommand } from "@aws-sdk/client-eventbridge";

// The source the stack's rule and ConsumerRefreshRequestPolicy allow, and the detail type the
// rotator answers.
export const CONSUMER_SOURCE = "cmstoken.consumer";
export const REFRESH_REQUESTED = "Service Token Refresh Requested";

// ConsumerError.reason values (the Python helper's).
export const NOT_BOOTSTRAPPED = "not_bootstrapped";
export const SECRET_NOT_FOUND = "secret_not_found";
export const ACCESS_DENIED = "access_denied";
export const CANNOT_DECRYPT = "cannot_decrypt";
export const UNREADABLE = "unreadable";
export const UNAVAILABLE = "unavailable";
export const EXPIRED = "expired";
export const REAUTHORIZATION_REQUIRED = "reauthorization_required";
export const REQUEST_FAILED = "request_failed";
export const REFRESH_DEBOUNCED = "refresh_debounced";
export const REFRESH_TIMEOUT = "refresh_timeout";
export const STILL_REFUSED = "still_refused";

const BOOTSTRAP_HINT = "run the bootstrap (cmstoken-admin --stack NAME bootstrap)";
const ROTATOR_HINT =
  "check the rotator (its log group /cmstoken/STACK/rotator and its RotationFailingAlarm and " +
  "AuthorizationRequiredAlarm alarms), or force a rotation (cmstoken-admin --stack NAME rotate)";

const DEFAULTS = {
  maxAgeSeconds: 900,
  minValiditySeconds: 60,
  refusedSpreadSeconds: 10,
  refreshWaitSeconds: 60,
  pollIntervalSeconds: 5,
  minRefreshIntervalSeconds: 600, // when the document lacks min_refresh_interval_seconds
};
const NEAR_EXPIRY_RECHECK_SECONDS = 5; // a token read inside its last minutes: re-read this often
const READ_RETRY_MAX_SECONDS = 30; // back-off after failed reads: 1, 2, 4 ... this
const FORBIDDEN_RECHECK_SECONDS = 5; // a 403 re-reads the secret at most this often
const NO_ROTATION = new Set([REFRESH_DEBOUNCED, REFRESH_TIMEOUT, STILL_REFUSED]);
// AWS answers that say "try again later", and the KMS and access refusals told apart.
const words = (text) => new Set(text.split(/\s+/));
const TRANSIENT_CODES = words(`ThrottlingException Throttling TooManyRequestsException
  RequestLimitExceeded InternalServiceError InternalServerError InternalFailure InternalException
  ServiceException ServiceUnavailable RequestTimeout RequestTimeoutException`);
const KMS_CODES = words(`DecryptionFailure KMSAccessDeniedException KMSDisabledException
  KMSInvalidStateException KMSNotFoundException`);
const PERMISSION_CODES = words(`AccessDeniedException NotAuthorizedForSourceException
  NotAuthorizedForDetailTypeException`);

/** No usable service token; `reason` is one of the constants above, `retryAt` (epoch seconds)
 * when a refresh request can work again (refresh_debounced, refresh_timeout, still_refused). */
export class ConsumerError extends Error {
  constructor(message, reason, retryAt = undefined) {
    super(message);
    this.name = "ConsumerError";
    this.reason = reason;
    this.retryAt = retryAt;
  }
}

/** A short, stable, non-reversible name of a secret, safe to log (the Python helper's). */
export function fingerprint(secret) {
  return createHash("sha256").update(secret, "utf8").digest("hex").slice(0, 12);
}

/** Real time in epoch seconds, and real sleeps. */
export const systemClock = {
  now: () => Date.now() / 1000,
  sleep: (seconds) => new Promise((resolve) => setTimeout(resolve, Math.max(0, seconds) * 1000)),
};

// Only warnings by default (info lines when you pass a logger, e.g. `console`).
const quietLogger = {
  info() {},
  warn: (message, fields) => console.warn(`cmstoken: ${message}`, fields),
};

/**
 * The published service token of one stack, read from `secretId` (the stack's
 * ServiceTokenSecretArn; a name is looked up in the caller's own account and region). Make one
 * per process, at module level, and reuse it while the Lambda environment is warm.
 *
 * Options: maxAgeSeconds (900), minValiditySeconds (60), refusedSpreadSeconds (10),
 * refreshWaitSeconds (60), pollIntervalSeconds (5), minRefreshIntervalSeconds (600; only for
 * documents without min_refresh_interval_seconds), eventBus (name or ARN; the default bus when
 * absent), eventSource (CONSUMER_SOURCE), region (when secretId and eventBus are no ARNs),
 * secretsClient and eventsClient (SDK v3 clients; made on first use otherwise), logger
 * ({info, warn}), clock ({now() in seconds, sleep(seconds) -> Promise}), random (() -> [0, 1)).
 */
export class ServiceTokenProvider {
  #entry = null; // {document, freshUntil, readAt, failures}: the cached document
  #reading = null; // the read of the cache in flight, shared by concurrent callers
  #replacing = null; // {token, promise}: the one refresh request and wait in flight
  #lastRequest = null; // {fingerprint, at}: the last refresh request sent
  #secretsClient;
  #eventsClient;

  constructor(secretId, options = {}) {
    if (typeof secretId !== "string" || !secretId) {
      throw new TypeError("secretId must name the service token secret");
    }
    const settings = { ...DEFAULTS, ...options };
    for (const name of Object.keys(DEFAULTS)) {
      if (!(settings[name] >= 0)) throw new RangeError(`${name} must not be negative`);
    }
    if (!(settings.pollIntervalSeconds > 0)) {
      throw new RangeError("pollIntervalSeconds must be positive");
    }
    this.secretId = secretId;
    this.maxAgeSeconds = settings.maxAgeSeconds;
    this.minValiditySeconds = settings.minValiditySeconds;
    this.refusedSpreadSeconds = settings.refusedSpreadSeconds;
    this.refreshWaitSeconds = settings.refreshWaitSeconds;
    this.pollIntervalSeconds = settings.pollIntervalSeconds;
    this.minRefreshIntervalSeconds = settings.minRefreshIntervalSeconds;
    this.eventBus = settings.eventBus || undefined;
    this.eventSource = settings.eventSource ?? CONSUMER_SOURCE;
    this.region = settings.region;
    this.clock = settings.clock ?? systemClock;
    this.random = settings.random ?? Math.random;
    this.logger = settings.logger ?? quietLogger;
    this.#secretsClient = settings.secretsClient;
    this.#eventsClient = settings.eventsClient;
  }

  /** The cached document: {token, expiresAt, apiUrl, refreshedAt, credentialStatus,
   * minRefreshIntervalSeconds} (times in epoch seconds; `token` is not enumerable, so that
   * printing the document never shows it). */
  async document() {
    const now = this.clock.now();
    const entry = this.#entry;
    if (entry && now < entry.freshUntil) return entry.document;
    const valid = entry && now < entry.document.expiresAt;
    if (valid && this.#reading) return entry.document; // another caller reads; this one works
    try {
      return await this.#load();
    } catch (error) {
      if (
        !(error instanceof ConsumerError) ||
        !valid ||
        this.clock.now() >= entry.document.expiresAt
      ) {
        throw error;
      }
      return this.#serveCached(entry, error);
    }
  }

  /** The service token. */
  async token() {
    return (await this.document()).token;
  }

  /** Where the management API lives ({base_url}/api). */
  async apiUrl() {
    return (await this.document()).apiUrl;
  }

  /** Until when (epoch seconds) the cached document is served without a read; undefined
   * before the first read. */
  get freshUntil() {
    return this.#entry?.freshUntil;
  }

  /** A replacement for `token`, which the API answered with 401: the published token when it
   * is another one; otherwise one refresh request, and the rotated token once published. */
  async refused(token) {
    const document = await this.#oneAtATime(
      token,
      () => this.#replace(token, "refused", null),
      () => this.#otherThan(token),
    );
    return document.token;
  }

  /** For a 403: the published token when it is no longer `token`, else null (a 403 also means
   * "this token may not do that": no refresh is requested). */
  async replacement(token) {
    const other = this.#otherThan(token);
    if (other) return other.token;
    await this.#reading?.catch(() => {});
    const entry = this.#entry;
    const now = this.clock.now();
    if (entry && now < entry.document.expiresAt) {
      if (entry.document.token !== token) return entry.document.token;
      if (now - entry.readAt < FORBIDDEN_RECHECK_SECONDS) return null;
    }
    let current;
    try {
      current = await this.#load();
    } catch (error) {
      if (!(error instanceof ConsumerError)) throw error;
      this.logger.warn("could not re-read the service token secret after a 403", {
        reason: error.reason,
      });
      return null;
    }
    return current.token === token ? null : current.token;
  }

  /** Right after creating a resource you will use next (the API wants a refreshed token for
   * it), never on every call: the rotated token, or the current one with a warning when none
   * can come yet or none came within refreshWaitSeconds. */
  async newResource() {
    const current = await this.#read();
    if (current.credentialStatus !== "active") return this.#remember(current).token;
    try {
      const document = await this.#oneAtATime(current.token, () =>
        this.#replace(current.token, "new_resource", current),
      );
      return document.token;
    } catch (error) {
      if (!(error instanceof ConsumerError) || !NO_ROTATION.has(error.reason)) throw error;
      this.logger.warn(`no rotated service token for the new resource; using the current one`, {
        reason: error.reason,
        error: error.message,
      });
    }
    return this.#remember(current).token;
  }

  /** fetch() with `Authorization: Bearer` set; after a 401 (or a 403 when the published token
   * changed) the request is sent once more with the new token. A streamed body (a
   * ReadableStream, or a Request with a body) is not retried. */
  async fetch(input, init = {}) {
    const send = (token) => {
      const headers = new Headers(
        init.headers ?? (input instanceof Request ? input.headers : undefined),
      );
      headers.set("Authorization", `Bearer ${token}`);
      return globalThis.fetch(input, { ...init, headers });
    };
    const token = await this.token();
    const response = await send(token);
    const body = init.body;
    const streamed =
      body instanceof ReadableStream ||
      typeof body?.[Symbol.asyncIterator] === "function" ||
      (input instanceof Request && input.body !== null);
    if ((response.status !== 401 && response.status !== 403) || streamed) return response;
    const next =
      response.status === 401 ? await this.refused(token) : await this.replacement(token);
    if (!next) return response;
    await response.body?.cancel(); // let the connection go back to the pool
    this.logger.info(`service answered ${response.status}; retrying once with a new token`, {
      refused: fingerprint(token),
      current: fingerprint(next),
    });
    return send(next);
  }

  // --- the cache ---------------------------------------------------------------------------

  /** One read of the cache at a time per process; concurrent callers share it. */
  #load() {
    this.#reading ??= this.#read()
      .then((document) => this.#remember(document))
      .finally(() => {
        this.#reading = null;
      });
    return this.#reading;
  }

  /** Cache a usable document until min(now + maxAge * (1 - u1/2), expiry - minValidity *
   * (1 + u2)); when that is past already, re-check in 5 * (1 - u/2) s, never past expiry
   * (the Python helper's rules: cmstoken/consumer/spread.py). */
  #remember(document) {
    const now = this.clock.now();
    if (now >= document.expiresAt) throw expired(document);
    const byAge = now + this.#shortened(this.maxAgeSeconds);
    const byExpiry = document.expiresAt - this.minValiditySeconds * (1 + this.random());
    let freshUntil = Math.min(byAge, byExpiry);
    if (now >= byExpiry) {
      const expiresAt = iso(document.expiresAt);
      this.logger.warn("the published service token expires soon and no fresher one is published", {
        expires_at: expiresAt,
      });
      const recheck = this.#shortened(NEAR_EXPIRY_RECHECK_SECONDS);
      freshUntil = Math.min(now + recheck, document.expiresAt);
    }
    if (document.credentialStatus !== "active") {
      this.logger.warn(
        "the stack's refresh credential needs reauthorization: the service token works until " +
          `it expires; ${BOOTSTRAP_HINT}`,
        { expires_at: iso(document.expiresAt) },
      );
    }
    this.#entry = { document, freshUntil, readAt: now, failures: 0 };
    return document;
  }

  /** The cached document after a failed read (it is still valid); the next read backs off. */
  #serveCached(entry, error) {
    const failures = entry.failures + 1;
    const delay = Math.min(2 ** (failures - 1), READ_RETRY_MAX_SECONDS);
    const now = this.clock.now();
    if (this.#entry === entry) {
      this.#entry = {
        ...entry,
        freshUntil: Math.min(now + delay, entry.document.expiresAt),
        failures,
      };
    }
    this.logger.warn("could not read the service token secret; using the cached token", {
      reason: error.reason,
      error: error.message,
      valid_until: iso(entry.document.expiresAt),
      retry_in_seconds: delay,
    });
    return entry.document;
  }

  /** The cached document when it is still valid and its token is not `token`. */
  #otherThan(token) {
    const entry = this.#entry;
    if (entry && entry.document.token !== token && this.clock.now() < entry.document.expiresAt) {
      return entry.document;
    }
    return undefined;
  }

  // --- replacing a refused token -----------------------------------------------------------

  /** One refresh request and wait at a time per process: a caller for the same token joins the
   * running one; a caller for another token waits for it to end, then looks again. */
  async #oneAtATime(token, start, shortcut = () => undefined) {
    for (;;) {
      const found = shortcut();
      if (found) return found;
      const running = this.#replacing;
      if (running === null) break;
      if (running.token === token) return running.promise;
      await running.promise.catch(() => {});
    }
    const promise = start().finally(() => {
      this.#replacing = null;
    });
    this.#replacing = { token, promise };
    return promise;
  }

  /** Re-read (after the spread, unless `current` was just read); a different token is used at
   * once; otherwise check that a request can help, send it and wait for the rotated token. */
  async #replace(token, reason, current) {
    if (current === null) {
      const pause = this.refusedSpreadSeconds * this.random();
      if (pause > 0 && this.#entry?.document.token === token) {
        await this.clock.sleep(pause);
        const other = this.#otherThan(token);
        if (other) return other; // read meanwhile by another caller
      }
      current = await this.#read();
    }
    if (current.token !== token) {
      this.logger.info("refused service token replaced by the published one", {
        refused: fingerprint(token),
        current: fingerprint(current.token),
      });
      return this.#remember(current);
    }
    requireActive(current);
    const interval = current.minRefreshIntervalSeconds ?? this.minRefreshIntervalSeconds;
    this.#check(current, interval);
    const requestedAt = await this.#send(current, reason);
    const rotated = await this.#waitForOtherThan(token);
    if (!rotated) {
      throw new ConsumerError(
        `the service refused the service token ${fingerprint(token)} and no new one was ` +
          `published within ${this.refreshWaitSeconds.toFixed(0)} s of the refresh request; ` +
          ROTATOR_HINT,
        REFRESH_TIMEOUT,
        requestedAt + interval,
      );
    }
    return this.#remember(rotated);
  }

  /** ConsumerError when no request can replace the refused `current` token now. */
  #check(current, interval) {
    const refused = fingerprint(current.token);
    const now = this.clock.now();
    if (current.refreshedAt !== undefined && now < current.refreshedAt + interval) {
      const readyAt = current.refreshedAt + interval;
      throw new ConsumerError(
        `the service refused the service token ${refused}, and no refresh can replace it ` +
          `before ${iso(readyAt)}: the stack refreshed it at ${iso(current.refreshedAt)} and its ` +
          `rotator skips forced refreshes within ${interval.toFixed(0)} s of the last one ` +
          "(MIN_REFRESH_INTERVAL_SECONDS); not requesting one now (a resource created since the " +
          "last refresh becomes accessible with the next one)",
        REFRESH_DEBOUNCED,
        readyAt,
      );
    }
    const last = this.#lastRequest;
    if (last && last.fingerprint === refused && now < last.at + interval) {
      throw new ConsumerError(
        `the service refused the service token ${refused}; a refresh was requested for it at ` +
          `${iso(last.at)} and no new token came; not asking again before ` +
          `${iso(last.at + interval)}; ${ROTATOR_HINT}`,
        STILL_REFUSED,
        last.at + interval,
      );
    }
  }

  /** Send one refresh request for the current token; when it was sent. */
  async #send(current, reason) {
    const now = this.clock.now();
    const detail = {
      reason,
      requested_at: iso(now),
      secret_id: this.secretId,
      token_expires_at: iso(current.expiresAt),
      token_fingerprint: fingerprint(current.token),
    };
    const entry = {
      Source: this.eventSource,
      DetailType: REFRESH_REQUESTED,
      Detail: JSON.stringify(detail),
    };
    if (this.eventBus) entry.EventBusName = this.eventBus;
    let answer;
    try {
      answer = await this.#events().send(new PutEventsCommand({ Entries: [entry] }));
    } catch (error) {
      throw this.#requestFailed(awsCode(error), undefined, transient(error));
    }
    const result = answer.Entries?.[0] ?? {};
    if (answer.FailedEntryCount || result.ErrorCode || !result.EventId) {
      const code = result.ErrorCode ?? "no EventId in the answer";
      throw this.#requestFailed(
        code,
        result.ErrorMessage,
        code === "InternalFailure" || code === "ThrottlingException",
      );
    }
    this.#lastRequest = { fingerprint: detail.token_fingerprint, at: now };
    this.logger.info("service token refresh requested", { ...detail, event_id: result.EventId });
    return now;
  }

  /** A request_failed error that says what to do about EventBridge's `code`. */
  #requestFailed(code, message, retryable) {
    const bus = this.eventBus ? `the bus ${this.eventBus}` : "the default bus";
    const where = this.eventBus ? `the event bus ${this.eventBus}` : "the default event bus";
    let hint = "EventBridge refused the event; the rotator was not asked";
    if (retryable) {
      hint = "a retryable failure: EventBridge may take a later request";
    } else if (PERMISSION_CODES.has(code)) {
      hint =
        `the workload needs events:PutEvents on ${bus} for source '${this.eventSource}' (the ` +
        `stack's ConsumerRefreshRequestPolicy grants it for '${CONSUMER_SOURCE}'; ` +
        "consumer.yaml's policy with RefreshRequestBusArn in another account), and a bus of " +
        "another account must allow this account in its policy";
    }
    const text = message ? `${code}: ${awsText(message)}` : code;
    return new ConsumerError(
      `could not request a service token refresh on ${where} (${text}); ${hint}`,
      REQUEST_FAILED,
    );
  }

  /** `seconds` less a random share of at most half. */
  #shortened(seconds) {
    return seconds * (1 - this.random() / 2);
  }

  /** Poll the secret every pollInterval * (1 - u/2) s until it holds a token other than
   * `token` (that document), or refreshWaitSeconds pass (undefined). A read that fails for a
   * while (throttled, unreachable) is no new token: polling goes on. */
  async #waitForOtherThan(token) {
    const started = this.clock.now();
    const deadline = started + this.refreshWaitSeconds;
    let remaining;
    while ((remaining = deadline - this.clock.now()) > 0) {
      await this.clock.sleep(Math.min(this.#shortened(this.pollIntervalSeconds), remaining));
      let current;
      try {
        current = await this.#read();
      } catch (error) {
        if (error instanceof ConsumerError && error.reason === UNAVAILABLE) continue;
        throw error;
      }
      if (current.token !== token) {
        this.logger.info("rotated service token published", {
          current: fingerprint(current.token),
          waited_seconds: Math.round((this.clock.now() - started) * 10) / 10,
        });
        return current;
      }
      requireActive(current);
    }
    return undefined;
  }

  // --- reading the secret ------------------------------------------------------------------

  #secrets() {
    this.#secretsClient ??= new SecretsManagerClient(
      clientRegion(arnRegion(this.secretId, "secretsmanager"), this.region),
    );
    return this.#secretsClient;
  }

  #events() {
    this.#eventsClient ??= new EventBridgeClient(
      clientRegion(arnRegion(this.eventBus, "events"), this.region),
    );
    return this.#eventsClient;
  }

  /** The secret's document, read now (no cache), or a ConsumerError that says why not. */
  async #read() {
    let answer;
    try {
      answer = await this.#secrets().send(new GetSecretValueCommand({ SecretId: this.secretId }));
    } catch (error) {
      if (awsCode(error) === "ResourceNotFoundException") throw await this.#notFound();
      throw await this.#readFailed(error);
    }
    if (answer.SecretString === undefined) {
      throw new ConsumerError(
        `the service token secret '${this.secretId}' holds binary data, not a JSON document`,
        UNREADABLE,
      );
    }
    if (!answer.SecretString.trim()) throw notBootstrapped(this.secretId);
    return parseDocument(answer.SecretString, this.secretId);
  }

  /** After ResourceNotFoundException (a missing secret, or the stack's empty one before the
   * bootstrap): DescribeSecret tells the two apart. */
  async #notFound() {
    const secretId = this.secretId;
    try {
      await this.#secrets().send(new DescribeSecretCommand({ SecretId: secretId }));
      return notBootstrapped(secretId);
    } catch (error) {
      const code = awsCode(error);
      if (code !== "ResourceNotFoundException") {
        return new ConsumerError(
          `Secrets Manager has no value for the service token secret '${secretId}' ` +
            `(${await this.#where()}): either the stack is not bootstrapped yet ` +
            `(${BOOTSTRAP_HINT}) or no such secret exists there (the secret id or the ` +
            `consumer's region is wrong); DescribeSecret, which tells the two apart, failed ` +
            `(${code}): the stack's ConsumerPolicy grants it`,
          NOT_BOOTSTRAPPED,
        );
      }
    }
    return new ConsumerError(
      `the service token secret '${secretId}' does not exist where it was asked for ` +
        `(${await this.#where()}): the secret id or the consumer's region is wrong; use the ` +
        "stack's ServiceTokenSecretArn output, its full ARN (a name or a partial ARN is looked " +
        "up in the caller's own account)",
      SECRET_NOT_FOUND,
    );
  }

  /** Why GetSecretValue failed: AWS's trouble, the KMS key, the policies, anything else. */
  async #readFailed(error) {
    const code = awsCode(error);
    const text = `cannot read secret '${this.secretId}': ${code}`;
    if (transient(error)) return new ConsumerError(`${text}; retry later`, UNAVAILABLE);
    const where = await this.#where();
    // Secrets Manager's words when KMS, not the secret's policy, refused the caller
    const kms = /access to kms|kms service key/i.test(error.message ?? "");
    const refusal = code === "AccessDeniedException" || code === "InvalidRequestException";
    if (KMS_CODES.has(code) || (kms && refusal)) {
      return new ConsumerError(
        `${text} (${where}); Secrets Manager cannot use the secret's KMS key: the key must be ` +
          "enabled, and its key policy and this principal's policy must allow kms:Decrypt " +
          "through Secrets Manager",
        CANNOT_DECRYPT,
      );
    }
    if (code === "AccessDeniedException") {
      return new ConsumerError(
        `${text} (${where}); this principal needs secretsmanager:GetSecretValue on the secret's ` +
          "full ARN (the stack's ConsumerPolicy grants it, consumer.yaml's policy in another " +
          "account), and from another account the secret's resource policy must allow this account",
        ACCESS_DENIED,
      );
    }
    return new ConsumerError(
      `${text}: ${awsText(error.message)} (${where}); the workload needs credentials and ` +
        "secretsmanager:GetSecretValue on the service token secret (the stack's ConsumerPolicy " +
        "grants it)",
      UNREADABLE,
    );
  }

  /** The region and account asked, for messages. */
  async #where() {
    let region = "none configured";
    try {
      region = (await this.#secrets().config.region()) || region;
    } catch {
      // no region configured
    }
    const parts = this.secretId.split(":");
    if (parts.length >= 7 && parts[0] === "arn" && parts[2] === "secretsmanager") {
      return `region ${region}, account ${parts[4]} (from the ARN)`;
    }
    return `region ${region}, the credentials' account`;
  }
}

// --- the document and small helpers ----------------------------------------------------------

/** The published document, checked; ConsumerError (unreadable) naming the field, never a value. */
function parseDocument(text, secretId) {
  const fail = (problem) =>
    new ConsumerError(
      `the service token secret '${secretId}' cannot be used: service token: ${problem}`,
      UNREADABLE,
    );
  let raw;
  try {
    raw = JSON.parse(text);
  } catch {
    throw fail("not valid JSON");
  }
  if (raw === null || typeof raw !== "object" || Array.isArray(raw)) {
    throw fail("expected a JSON object");
  }
  if (Number.isInteger(raw.schema_version) && raw.schema_version > 1) {
    const version = raw.schema_version;
    throw fail(
      `written by a newer version of this product (schema ${version}); update cmstoken.mjs`,
    );
  }
  const string = (key) => {
    if (typeof raw[key] !== "string" || !raw[key]) {
      throw fail(`field '${key}' must be a non-empty string`);
    }
    return raw[key];
  };
  const time = (key) => {
    const value = string(key);
    if (
      !/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$/.test(value) ||
      Number.isNaN(Date.parse(value))
    ) {
      throw fail(`field '${key}' must be an ISO 8601 UTC time`);
    }
    return Date.parse(value) / 1000;
  };
  if (raw.token_type != null && raw.token_type !== "Bearer") {
    throw fail("field 'token_type' must be 'Bearer'");
  }
  const status = raw.credential_status ?? "active";
  if (status !== "active" && status !== "reauthorization_required") {
    throw fail("field 'credential_status' must be one of ['active', 'reauthorization_required']");
  }
  const interval = raw.min_refresh_interval_seconds;
  if (interval != null && !(Number.isInteger(interval) && interval >= 0)) {
    throw fail("field 'min_refresh_interval_seconds' must be a whole number, not negative");
  }
  const document = {
    expiresAt: time("expires_at"),
    apiUrl: string("api_url"),
    refreshedAt: raw.refreshed_at == null ? undefined : time("refreshed_at"),
    credentialStatus: status,
    minRefreshIntervalSeconds: interval ?? undefined,
  };
  Object.defineProperty(document, "token", { value: string("token"), enumerable: false });
  return Object.freeze(document);
}

function requireActive(document) {
  if (document.credentialStatus !== "active") throw reauthorizationRequired(document);
}

function reauthorizationRequired(document) {
  return new ConsumerError(
    "the stack's refresh credential needs reauthorization, so no new service token can be made " +
      `(the published one expires at ${iso(document.expiresAt)}); a person must ${BOOTSTRAP_HINT}`,
    REAUTHORIZATION_REQUIRED,
  );
}

function expired(document) {
  if (document.credentialStatus !== "active") return reauthorizationRequired(document);
  return new ConsumerError(
    `the published service token expired at ${iso(document.expiresAt)} and no fresher one has ` +
      `been published; ${ROTATOR_HINT}`,
    EXPIRED,
  );
}

function notBootstrapped(secretId) {
  return new ConsumerError(
    `the service token secret '${secretId}' exists but has no value: the stack is not ` +
      `bootstrapped yet: ${BOOTSTRAP_HINT}`,
    NOT_BOOTSTRAPPED,
  );
}

/** `2026-11-22T04:00:00Z` (whole seconds, rounded down), as the Python helper writes times. */
function iso(epochSeconds) {
  return new Date(Math.floor(epochSeconds) * 1000).toISOString().replace(/\.\d{3}Z$/, "Z");
}

/** The region an ARN of `service` names (undefined for a name). */
function arnRegion(id, service) {
  const parts = (id ?? "").split(":");
  return parts.length >= 6 && parts[0] === "arn" && parts[2] === service && parts[3]
    ? parts[3]
    : undefined;
}

function clientRegion(...regions) {
  const region = regions.find(Boolean);
  return region ? { region } : {};
}

/** An SDK error's AWS error code (a network error's own code when no answer came). */
function awsCode(error) {
  if (error?.name && error.name !== "Error") return error.name;
  return error?.code ?? "Error";
}

/** Whether the same call may succeed later: no answer (the SDK's network errors carry
 * $metadata without a status), a 5xx, throttling. */
function transient(error) {
  const metadata = error?.$metadata;
  if (metadata && metadata.httpStatusCode === undefined) return true;
  return metadata?.httpStatusCode >= 500 || TRANSIENT_CODES.has(awsCode(error));
}

/** An error text from AWS, printable and short. */
function awsText(text) {
  const unprintable = /[\u0000-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g;
  const printable = String(text ?? "").replace(unprintable, "?");
  return printable.length > 200 ? `${printable.slice(0, 197)}...` : printable;
}
