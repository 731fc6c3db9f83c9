// Upstream 1.1.1 through the official TypeScript SDK: every create posts
// POST /v1/metrics/events (fire and forget); sandboxd must answer it 204
// instead of a 404 the SDK would swallow. The SDK's debug log is the only
// place its answer shows. The Go harness (TestUpstream111SDKMetricsEvent)
// runs it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Sandbox } from "@alibaba-group/opensandbox";
import { BUSYBOX, TEST_TIMEOUT, connectionConfig, destroy } from "./lib.mjs";

test("create posts its metrics event and sandboxd answers 204", TEST_TIMEOUT, async () => {
  const lines = [];
  const log = console.log;
  console.log = (...args) => lines.push(args.map(String).join(" "));
  let sb;
  try {
    sb = await Sandbox.create({
      connectionConfig: connectionConfig({ debug: true }),
      image: BUSYBOX,
      entrypoint: ["tail", "-f", "/dev/null"],
      timeoutSeconds: 600,
    });
    const answered = () => lines.find((l) => l.includes("<- POST") && l.includes("/v1/metrics/events"));
    for (let i = 0; i < 100 && !answered(); i++) await new Promise((r) => setTimeout(r, 100));
    console.log = log;
    const line = answered();
    assert.ok(line, `no answer to the metrics event in the SDK's log:\n${lines.filter((l) => l.includes("metrics")).join("\n")}`);
    assert.match(line, / 204$/, `metrics event answered: ${line}`);
  } finally {
    console.log = log;
    await destroy(sb);
  }
});
