// A create through the official TypeScript SDK that names a warm pool
// (extensions.poolRef), as upstream's SDK users do on Kubernetes. The Go test
// (e2e/pool_test.go) filled the pool and checks afterwards that the sandbox
// was one of its members; the sandbox is left for it to inspect.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Sandbox, SandboxManager } from "@alibaba-group/opensandbox";
import { BUSYBOX, TEST_TIMEOUT, connectionConfig, mustRun } from "./lib.mjs";

test("create from a pool by poolRef, then run a command", TEST_TIMEOUT, async () => {
  const pool = process.env.SANDBOXD_POOL;
  const suite = process.env.SANDBOXD_SUITE;
  assert.ok(pool && suite, "SANDBOXD_POOL and SANDBOXD_SUITE are set by the Go test");
  const config = connectionConfig();
  // The SDK insists on an image and sends default resources; the pool's win.
  const sb = await Sandbox.create({
    connectionConfig: config,
    image: BUSYBOX,
    extensions: { poolRef: pool },
    metadata: { suite },
    timeoutSeconds: 600,
  });
  const manager = SandboxManager.create({ connectionConfig: config });
  try {
    assert.deepEqual(await mustRun(sb, "echo pooled"), ["pooled"]);
    const info = await sb.getInfo();
    assert.equal(info.status.state, "Running");
    assert.deepEqual(info.metadata, { suite });
    assert.ok(info.expiresAt instanceof Date, "the request's timeout applies");
    const list = await manager.listSandboxInfos({ metadata: { suite } });
    assert.deepEqual(list.items.map((s) => s.id), [sb.id]);
  } finally {
    await sb.close();
    await manager.close();
  }
});
