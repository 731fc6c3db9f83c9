// networkPolicy and the egress calls of the official TypeScript SDK
// (getEgressPolicy, patchEgressRules, deleteEgressRules), as upstream's own
// e2e test 01a uses them, against the test's DNS and HTTP servers (the Go
// harness passes their names in SANDBOXD_EGRESS_ALLOWED / _DENIED).
import { test } from "node:test";
import assert from "node:assert/strict";
import { Sandbox } from "@alibaba-group/opensandbox";
import { BUSYBOX, connectionConfig, TEST_TIMEOUT } from "./lib.mjs";

const allowed = process.env.SANDBOXD_EGRESS_ALLOWED;
const denied = process.env.SANDBOXD_EGRESS_DENIED;

// reaches reports whether the sandbox gets an HTTP answer from host.
async function reaches(sandbox, host) {
  const ex = await sandbox.commands.run(`printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 5 ${host} 80`);
  return ex.logs.stdout.some((m) => m.text.includes("hello from"));
}

function targets(policy) {
  return Object.fromEntries(policy.egress.map((r) => [r.target, r.action]));
}

for (const useServerProxy of [false, true]) {
  test(`networkPolicy through the SDK (useServerProxy=${useServerProxy})`, TEST_TIMEOUT, async () => {
    const sandbox = await Sandbox.create({
      connectionConfig: connectionConfig({ useServerProxy }),
      image: BUSYBOX,
      entrypoint: ["tail", "-f", "/dev/null"],
      timeoutSeconds: 600,
      networkPolicy: { egress: [{ action: "allow", target: allowed }] },
    });
    try {
      let policy = await sandbox.getEgressPolicy();
      assert.equal(policy.defaultAction, "deny");
      assert.deepEqual(targets(policy), { [allowed]: "allow" });
      assert.ok(await reaches(sandbox, allowed), "the allowed name is reachable");
      assert.ok(!(await reaches(sandbox, denied)), "the denied name is unreachable");

      await sandbox.patchEgressRules([
        { action: "allow", target: denied },
        { action: "deny", target: allowed },
      ]);
      policy = await sandbox.getEgressPolicy();
      assert.deepEqual(targets(policy), { [denied]: "allow", [allowed]: "deny" });
      assert.ok(await reaches(sandbox, denied), "after the patch the first name is reachable");
      assert.ok(!(await reaches(sandbox, allowed)), "after the patch the second name is unreachable");

      await sandbox.deleteEgressRules([denied, "nonexistent.example.com"]);
      policy = await sandbox.getEgressPolicy();
      assert.deepEqual(targets(policy), { [allowed]: "deny" });
      assert.equal(policy.defaultAction, "deny");
      assert.ok(!(await reaches(sandbox, denied)), "after the delete the first name is unreachable again");
    } finally {
      await sandbox.kill();
    }
  });
}
