// The whole sandbox lifecycle through the official TypeScript SDK, with
// execd traffic going through the endpoints sandboxd returns, once with
// useServerProxy false and once with true (sandboxd answers the same
// endpoint either way).
import { test } from "node:test";
import assert from "node:assert/strict";
import { Sandbox, SandboxManager, SandboxApiException } from "@alibaba-group/opensandbox";
import { BUSYBOX, connectionConfig } from "./lib.mjs";

const domain = process.env.SANDBOXD_DOMAIN;

// echoOK runs `echo connect-ok` in a sandbox and checks its output.
async function echoOK(sandbox, when) {
  const ex = await sandbox.commands.run("echo connect-ok");
  assert.deepEqual(ex.logs.stdout.map((m) => m.text), ["connect-ok"], `stdout ${when}`);
  assert.equal(ex.exitCode, 0, `exit code ${when}`);
}

// notFound asserts that a promise rejects with the API's 404.
async function notFound(promise, what) {
  await assert.rejects(promise, (err) => {
    assert.ok(err instanceof SandboxApiException, `${what}: unexpected error ${err}`);
    assert.equal(err.statusCode, 404, what);
    return true;
  });
}

for (const useServerProxy of [false, true]) {
  test(`create, use, renew, pause, resume, connect and kill (useServerProxy=${useServerProxy})`, async () => {
    const config = connectionConfig({ useServerProxy });
    const suite = `sdk-${useServerProxy}-${process.pid}`;
    const manager = SandboxManager.create({ connectionConfig: config });
    const sandbox = await Sandbox.create({
      connectionConfig: config,
      image: BUSYBOX,
      entrypoint: ["tail", "-f", "/dev/null"],
      timeoutSeconds: 600,
      resource: { cpu: "1", memory: "512Mi" },
      metadata: { suite },
    });
    const opened = [sandbox];
    try {
      for (const port of [44772, 18080]) {
        const ep = await sandbox.getEndpoint(port);
        assert.equal(ep.endpoint, `${domain}/sandboxes/${sandbox.id}/proxy/${port}`, `endpoint of port ${port}`);
        assert.ok(ep.headers && Object.keys(ep.headers).length > 0, `endpoint of port ${port} carries a token header`);
      }
      await echoOK(sandbox, "after create");

      const info = await sandbox.getInfo();
      assert.equal(info.id, sandbox.id);
      assert.equal(info.status.state, "Running");
      assert.deepEqual(info.metadata, { suite });
      assert.deepEqual(info.entrypoint, ["tail", "-f", "/dev/null"]);
      assert.ok(info.createdAt instanceof Date);
      assert.ok(info.expiresAt instanceof Date, "expiresAt is set for a sandbox with a timeout");

      const renewed = await sandbox.renew(1800);
      assert.ok(renewed.expiresAt instanceof Date, "renew returns the new expiresAt");
      assert.ok(renewed.expiresAt > info.expiresAt, `renewed ${renewed.expiresAt.toISOString()} is after ${info.expiresAt.toISOString()}`);
      assert.equal((await sandbox.getInfo()).expiresAt.getTime(), renewed.expiresAt.getTime(), "getInfo shows the renewed expiry");

      const listed = await manager.listSandboxInfos({ metadata: { suite } });
      assert.deepEqual(listed.items.map((s) => s.id), [sandbox.id]);
      assert.equal(listed.pagination.totalItems, 1);
      const running = await manager.listSandboxInfos({ states: ["Running"], metadata: { suite } });
      assert.deepEqual(running.items.map((s) => s.id), [sandbox.id]);
      const other = await manager.listSandboxInfos({ metadata: { suite: `${suite}-other` } });
      assert.deepEqual(other.items, []);

      await sandbox.pause();
      assert.equal((await sandbox.getInfo()).status.state, "Paused");
      const paused = await manager.listSandboxInfos({ states: ["Paused"], metadata: { suite } });
      assert.deepEqual(paused.items.map((s) => s.id), [sandbox.id]);

      const resumed = await sandbox.resume();
      opened.push(resumed);
      assert.equal(resumed.id, sandbox.id);
      assert.equal((await resumed.getInfo()).status.state, "Running");
      await echoOK(resumed, "after resume");

      const connected = await Sandbox.connect({ sandboxId: sandbox.id, connectionConfig: config });
      opened.push(connected);
      await echoOK(connected, "after connect");
    } finally {
      await sandbox.kill();
      for (const s of opened) await s.close();
    }
    await notFound(manager.getSandboxInfo(sandbox.id), "getSandboxInfo after kill");
    await notFound(Sandbox.connect({ sandboxId: sandbox.id, connectionConfig: config }), "connect after kill");
    await manager.close();
  });
}
