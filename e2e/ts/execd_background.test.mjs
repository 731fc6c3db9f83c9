// Background commands (status, logs with a cursor), interrupts, bash
// sessions, health and metrics through the official TypeScript SDK. One
// code-interpreter sandbox serves every test.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { SandboxApiException } from "@alibaba-group/opensandbox";
import { TEST_TIMEOUT, createSandbox, destroy, mustRun, stdoutOf } from "./lib.mjs";

let sb;
before(async () => {
  sb = await createSandbox();
});
after(async () => {
  await destroy(sb);
});

// poll calls fn until it returns a truthy value; it gives up after many
// tries only so that a broken server fails the test instead of hanging it.
async function poll(what, fn) {
  for (let i = 0; i < 600; i++) {
    const v = await fn();
    if (v) return v;
    await sleep(100);
  }
  assert.fail(`gave up waiting for ${what}`);
}

async function rejectsWith(promise, status, what) {
  await assert.rejects(promise, (err) => {
    assert.ok(err instanceof SandboxApiException, `${what}: unexpected error ${err}`);
    assert.equal(err.statusCode, status, `${what}: status`);
    return true;
  });
}

test("a background command: status, then logs read on from a cursor", TEST_TIMEOUT, async () => {
  // It prints three lines, waits for /tmp/go, prints two more (one on
  // stderr, which background logs combine) and fails.
  const command = "echo line1; echo line2; echo line3; while [ ! -e /tmp/go ]; do sleep 0.1; done; echo line4; echo line5 >&2; exit 3";
  const ex = await sb.commands.run(command, { background: true });
  assert.match(ex.id ?? "", /\S/, "the init event carries the command id");
  assert.ok(ex.complete, "a background command's stream completes at once");
  assert.deepEqual(stdoutOf(ex), []);

  const first = await poll("the first three lines", async () => {
    const logs = await sb.commands.getBackgroundCommandLogs(ex.id);
    return logs.content === "line1\nline2\nline3\n" && logs;
  });
  assert.equal(first.cursor, 3);
  const running = await sb.commands.getCommandStatus(ex.id);
  assert.equal(running.id, ex.id);
  assert.equal(running.running, true);
  assert.equal(running.exitCode, null);
  assert.equal(running.finishedAt, null);
  assert.ok(running.startedAt instanceof Date);
  assert.equal(running.content, command);
  // Nothing new yet.
  assert.deepEqual(await sb.commands.getBackgroundCommandLogs(ex.id, first.cursor), { content: "", cursor: 3 });

  await mustRun(sb, "touch /tmp/go");
  const done = await poll("the command to finish", async () => {
    const st = await sb.commands.getCommandStatus(ex.id);
    return !st.running && st;
  });
  assert.equal(done.exitCode, 3);
  assert.ok(done.finishedAt instanceof Date && done.finishedAt >= done.startedAt);

  assert.deepEqual(await sb.commands.getBackgroundCommandLogs(ex.id, first.cursor), { content: "line4\nline5\n", cursor: 5 });
  assert.deepEqual(await sb.commands.getBackgroundCommandLogs(ex.id, 5), { content: "", cursor: 5 });
  assert.deepEqual(await sb.commands.getBackgroundCommandLogs(ex.id), { content: "line1\nline2\nline3\nline4\nline5\n", cursor: 5 });

  await rejectsWith(sb.commands.getCommandStatus("no-such-command"), 404, "status of an unknown command");
  await rejectsWith(sb.commands.getBackgroundCommandLogs("no-such-command"), 404, "logs of an unknown command");
});

test("interrupt a foreground command", TEST_TIMEOUT, async () => {
  let started;
  const init = new Promise((resolve) => (started = resolve));
  const run = sb.commands.run("echo started; sleep 600; echo not-reached", {}, { onInit: (i) => started(i.id) });
  const id = await init;
  await sb.commands.interrupt(id);
  const ex = await run;
  assert.equal(ex.error?.name, "CommandExecError");
  assert.notEqual(ex.exitCode, 0);
  assert.notEqual(ex.exitCode, null, `the exit code is a number, error ${JSON.stringify(ex.error)}`);
  assert.ok(!stdoutOf(ex).includes("not-reached"));
  assert.equal((await sb.commands.getCommandStatus(id)).running, false);
  await rejectsWith(sb.commands.interrupt(id), 500, "interrupt of a finished command");
});

test("interrupt background commands, one of which ignores SIGTERM", TEST_TIMEOUT, async () => {
  const plain = await sb.commands.run("sleep 600", { background: true });
  const stubborn = await sb.commands.run("trap '' TERM; echo trapped; while :; do sleep 0.2; done", { background: true });
  await poll("the trap to be set", async () => (await sb.commands.getBackgroundCommandLogs(stubborn.id)).content === "trapped\n");
  for (const ex of [plain, stubborn]) {
    await sb.commands.interrupt(ex.id);
    const st = await poll("the interrupted command to end", async () => {
      const s = await sb.commands.getCommandStatus(ex.id);
      return !s.running && s;
    });
    assert.notEqual(st.exitCode, 0);
    assert.notEqual(st.exitCode, null);
  }
  await rejectsWith(sb.commands.interrupt("no-such-command"), 404, "interrupt of an unknown command");
});

test("bash sessions keep their directory and variables", TEST_TIMEOUT, async () => {
  const sid = await sb.commands.createSession({ workingDirectory: "/tmp" });
  try {
    const pwd = await sb.commands.runInSession(sid, "pwd; cd /usr; export SESSION_VAR=kept");
    assert.deepEqual(stdoutOf(pwd), ["/tmp"]);
    assert.equal(pwd.exitCode, 0);
    const again = await sb.commands.runInSession(sid, "pwd; echo $SESSION_VAR");
    assert.deepEqual(stdoutOf(again), ["/usr", "kept"]);
    const failed = await sb.commands.runInSession(sid, "false");
    assert.equal(failed.exitCode, 1);
    assert.deepEqual(stdoutOf(await sb.commands.runInSession(sid, "echo after-failure")), ["after-failure"]);
  } finally {
    await sb.commands.deleteSession(sid);
  }
  await rejectsWith(sb.commands.runInSession(sid, "true"), 404, "run in a deleted session");
});

test("health and metrics", TEST_TIMEOUT, async () => {
  assert.equal(await sb.isHealthy(), true);
  const m = await sb.getMetrics();
  // The sandbox's limits: 1 CPU, 1 GiB.
  assert.equal(m.cpuCount, 1);
  assert.equal(m.memoryTotalMiB, 1024);
  assert.ok(m.memoryUsedMiB > 0 && m.memoryUsedMiB <= m.memoryTotalMiB, `memoryUsedMiB ${m.memoryUsedMiB}`);
  assert.ok(m.cpuUsedPercentage >= 0, `cpuUsedPercentage ${m.cpuUsedPercentage}`);
  assert.ok(Number.isInteger(m.timestamp) && new Date(m.timestamp).getFullYear() >= 2024, `timestamp ${m.timestamp}`);
});
