// Connects with the official TypeScript SDK to existing sandboxes, given
// as a comma-separated list in SANDBOXD_SANDBOX_IDS, and runs a command in
// each. Used after a server restart.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Sandbox } from "@alibaba-group/opensandbox";
import { connectionConfig } from "./lib.mjs";

const ids = (process.env.SANDBOXD_SANDBOX_IDS ?? "").split(",").filter(Boolean);

test("connect to existing sandboxes and run a command", async () => {
  assert.ok(ids.length > 0, "SANDBOXD_SANDBOX_IDS is empty");
  for (const sandboxId of ids) {
    const sandbox = await Sandbox.connect({ sandboxId, connectionConfig: connectionConfig() });
    try {
      const ex = await sandbox.commands.run("echo connect-ok");
      assert.deepEqual(ex.logs.stdout.map((m) => m.text), ["connect-ok"], `stdout in ${sandboxId}`);
      assert.equal(ex.exitCode, 0, `exit code in ${sandboxId}`);
    } finally {
      await sandbox.close();
    }
  }
});
