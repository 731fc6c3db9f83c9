// Lifecycle calls of the official TypeScript SDK against sandboxd, without
// touching execd (skipHealthCheck), so it only needs the lifecycle API.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Sandbox, SandboxManager, SandboxApiException } from "@alibaba-group/opensandbox";
import { BUSYBOX, connectionConfig } from "./lib.mjs";

test("create, inspect, list and kill a sandbox with the SDK", async () => {
  const config = connectionConfig();
  const suite = `smoke-${process.pid}`;
  const manager = SandboxManager.create({ connectionConfig: config });
  const sandbox = await Sandbox.create({
    connectionConfig: config,
    image: BUSYBOX,
    entrypoint: ["tail", "-f", "/dev/null"],
    timeoutSeconds: 600,
    resource: { cpu: "1", memory: "512Mi" },
    metadata: { suite },
    skipHealthCheck: true,
  });
  try {
    const info = await sandbox.getInfo();
    assert.equal(info.id, sandbox.id);
    assert.equal(info.status.state, "Running");
    assert.deepEqual(info.metadata, { suite });
    assert.ok(info.expiresAt instanceof Date, "expiresAt is set for a sandbox with a timeout");

    const list = await manager.listSandboxInfos({ states: ["Running"], metadata: { suite } });
    assert.deepEqual(list.items.map((s) => s.id), [sandbox.id]);
  } finally {
    await sandbox.kill();
    await sandbox.close();
  }

  await assert.rejects(manager.getSandboxInfo(sandbox.id), (err) => {
    assert.ok(err instanceof SandboxApiException, `unexpected error ${err}`);
    assert.equal(err.statusCode, 404);
    return true;
  });
  await manager.close();
});
