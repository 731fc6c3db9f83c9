// The official TypeScript SDK against sandboxd on the Kubernetes runtime
// (e2e/kubernetes_test.go starts it): the SDK's health check, a command and
// a file round trip all go through the agent over pods/exec.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Sandbox } from "@alibaba-group/opensandbox";
import { BUSYBOX, TEST_TIMEOUT, connectionConfig, destroy, stdoutOf } from "./lib.mjs";

test("a sandbox pod through the SDK: create, command, files, kill", TEST_TIMEOUT, async () => {
  const sb = await Sandbox.create({
    connectionConfig: connectionConfig(),
    image: BUSYBOX,
    entrypoint: ["tail", "-f", "/dev/null"],
    timeoutSeconds: 600,
    resource: { cpu: "1", memory: "256Mi" },
  });
  try {
    const info = await sb.getInfo();
    assert.equal(info.status.state, "Running");
    const ex = await sb.commands.run("echo pod-$((6*7)); cat /proc/1/cmdline | tr '\\0' ' '");
    assert.equal(ex.exitCode, 0);
    assert.equal(stdoutOf(ex)[0], "pod-42");
    const data = new TextEncoder().encode("through pods/exec\n");
    await sb.files.writeFiles([{ path: "/tmp/k8s.txt", data }]);
    assert.deepEqual(await sb.files.readBytes("/tmp/k8s.txt"), data);
  } finally {
    await destroy(sb);
  }
});
