// Shared set-up for the SDK tests: the Go harness (runNode in e2e/client_test.go)
// starts sandboxd and passes its address and API key in the environment.
import { ConnectionConfig } from "@alibaba-group/opensandbox";

export const BUSYBOX = "sandboxd-test/busybox:latest";
export const NOSHELL = "sandboxd-test/noshell:latest";
export const CODE_INTERPRETER = "opensandbox/code-interpreter:v1.1.0";

function requiredEnv(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run this file through the Go e2e harness`);
  return v;
}

// connectionConfig points the SDK at the sandboxd under test.
// SANDBOXD_USE_SERVER_PROXY=true switches execd traffic to the server proxy.
export function connectionConfig(overrides = {}) {
  return new ConnectionConfig({
    domain: requiredEnv("SANDBOXD_DOMAIN"),
    apiKey: requiredEnv("SANDBOXD_API_KEY"),
    requestTimeoutSeconds: 120,
    useServerProxy: process.env.SANDBOXD_USE_SERVER_PROXY === "true",
    ...overrides,
  });
}

// --- Helpers of the execd tests (execd_*.test.mjs) ---
import assert from "node:assert/strict";
import { Sandbox } from "@alibaba-group/opensandbox";

// TEST_TIMEOUT turns a hang into a failure; no test asserts a duration.
export const TEST_TIMEOUT = { timeout: 180_000 };

// createSandbox creates a code-interpreter sandbox the way the Deep Agents
// backend does (its image and entrypoint); opts override any option.
export function createSandbox(opts = {}) {
  return Sandbox.create({
    connectionConfig: connectionConfig(),
    image: CODE_INTERPRETER,
    entrypoint: ["/opt/code-interpreter/code-interpreter.sh"],
    timeoutSeconds: 600,
    resource: { cpu: "1", memory: "1Gi" },
    ...opts,
  });
}

// destroy deletes a sandbox and releases the SDK's connections.
export async function destroy(sandbox) {
  if (!sandbox) return;
  try {
    await sandbox.kill();
  } finally {
    await sandbox.close();
  }
}

// stdoutOf and stderrOf are the texts of a command's output events.
export const stdoutOf = (execution) => execution.logs.stdout.map((m) => m.text);
export const stderrOf = (execution) => execution.logs.stderr.map((m) => m.text);

// mustRun runs a command that must succeed and returns its stdout events.
export async function mustRun(sandbox, command, opts) {
  const ex = await sandbox.commands.run(command, opts);
  assert.equal(ex.exitCode, 0, `${command.slice(0, 200)}: exit ${ex.exitCode}, error ${JSON.stringify(ex.error)}, stderr ${JSON.stringify(stderrOf(ex))}`);
  return stdoutOf(ex);
}

// assertLines compares long lists of lines and reports the first difference
// instead of dumping megabytes.
export function assertLines(actual, expected, what) {
  for (let i = 0; i < Math.min(actual.length, expected.length); i++) {
    if (actual[i] !== expected[i]) {
      assert.fail(`${what}: line ${i} is ${JSON.stringify(actual[i].slice(0, 200))} (length ${actual[i].length}), want ${JSON.stringify(expected[i].slice(0, 200))} (length ${expected[i].length})`);
    }
  }
  assert.equal(actual.length, expected.length, `${what}: ${actual.length} lines, want ${expected.length}`);
}
