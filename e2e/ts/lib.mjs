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
