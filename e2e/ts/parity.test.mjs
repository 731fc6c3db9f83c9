// Upstream 1.1 parity through the official TypeScript SDK (reference
// execd-1.1.md): the directory listing's depth and symlink rules,
// FileInfo.type, per-file replace counts, isolation capabilities, renewals
// that shorten an expiry, and a create whose entrypoint is missing. The Go
// harness (TestParitySDK) runs it with max_sandbox_timeout_seconds = 3600.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Sandbox, SandboxApiException } from "@alibaba-group/opensandbox";
import { BUSYBOX, TEST_TIMEOUT, connectionConfig, createSandbox, destroy, mustRun } from "./lib.mjs";

let sb;
before(async () => {
  sb = await createSandbox();
  await mustRun(sb, [
    "mkdir -p /tmp/ls/a/sub",
    "echo x > /tmp/ls/a/x.txt",
    "echo deep > /tmp/ls/a/sub/deep.txt",
    "echo b > /tmp/ls/b.txt",
    "ln -s /tmp/ls/a /tmp/ls/link",
    "ln -s /tmp/ls/b.txt /tmp/ls/flink",
  ].join(" && "));
});
after(async () => {
  await destroy(sb);
});

// rejectsWith expects an SDK call to fail with an HTTP status; it returns
// the error's message.
async function rejectsWith(promise, status, what) {
  let message;
  await assert.rejects(promise, (err) => {
    assert.ok(err instanceof SandboxApiException, `${what}: unexpected error ${err}`);
    assert.equal(err.statusCode, status, `${what}: status (${err.message})`);
    message = err.message;
    return true;
  });
  return message;
}

const pathsAndTypes = (infos) => infos.map((f) => [f.path.replace("/tmp/ls/", ""), f.type]);

test("listDirectory: depth 1 by default, pre-order by name, symlinks listed and never entered", TEST_TIMEOUT, async () => {
  const top = [["a", "directory"], ["b.txt", "file"], ["flink", "symlink"], ["link", "symlink"]];
  assert.deepEqual(pathsAndTypes(await sb.files.listDirectory({ path: "/tmp/ls" })), top, "no depth: the server's default 1");
  assert.deepEqual(pathsAndTypes(await sb.files.listDirectory({ path: "/tmp/ls", depth: 1 })), top);
  assert.deepEqual(await sb.files.listDirectory({ path: "/tmp/ls", depth: 0 }), [], "depth 0 lists nothing");
  assert.deepEqual(pathsAndTypes(await sb.files.listDirectory({ path: "/tmp/ls", depth: 5 })), [
    ["a", "directory"],
    ["a/sub", "directory"],
    ["a/sub/deep.txt", "file"],
    ["a/x.txt", "file"],
    ["b.txt", "file"],
    ["flink", "symlink"],
    ["link", "symlink"],
  ]);
  const deep = (await sb.files.listDirectory({ path: "/tmp/ls", depth: 2 })).map((f) => f.path);
  assert.ok(!deep.includes("/tmp/ls/a/sub/deep.txt"), "depth 2 stops above the third level");
  assert.ok(deep.includes("/tmp/ls/a/sub"));
});

test("listDirectory errors", TEST_TIMEOUT, async () => {
  const link = await rejectsWith(sb.files.listDirectory({ path: "/tmp/ls/link" }), 400, "a symlink as the root");
  assert.match(link, /symbolic link/);
  const file = await rejectsWith(sb.files.listDirectory({ path: "/tmp/ls/b.txt" }), 400, "a file as the root");
  assert.match(file, /not a directory/);
  await rejectsWith(sb.files.listDirectory({ path: "/tmp/ls/missing" }), 404, "a missing root");
  await rejectsWith(sb.files.listDirectory({ path: "/tmp/ls", depth: -1 }), 400, "a negative depth");
});

test("FileInfo.type in info (lstat) and search", TEST_TIMEOUT, async () => {
  const infos = await sb.files.getFileInfo(["/tmp/ls/link", "/tmp/ls/a", "/tmp/ls/b.txt"]);
  assert.equal(infos["/tmp/ls/link"].type, "symlink");
  assert.equal(infos["/tmp/ls/link"].size, "/tmp/ls/a".length, "the link's own size");
  assert.equal(infos["/tmp/ls/a"].type, "directory");
  assert.equal(infos["/tmp/ls/b.txt"].type, "file");
  const found = await sb.files.search({ path: "/tmp/ls", pattern: "*.txt" });
  assert.deepEqual(found.map((f) => [f.path, f.type]).sort(), [
    ["/tmp/ls/a/sub/deep.txt", "file"],
    ["/tmp/ls/a/x.txt", "file"],
    ["/tmp/ls/b.txt", "file"],
  ]);
});

test("replaceContentsDetailed: a count per file, 0 where the text is absent", TEST_TIMEOUT, async () => {
  await sb.files.writeFiles([
    { path: "/tmp/rep/one", data: "aaaaa" },
    { path: "/tmp/rep/two", data: "nothing here" },
  ]);
  const counts = await sb.files.replaceContentsDetailed([
    { path: "/tmp/rep/one", oldContent: "aa", newContent: "b" },
    { path: "/tmp/rep/two", oldContent: "zz", newContent: "y" },
  ]);
  assert.deepEqual(counts.sort((x, y) => x.path.localeCompare(y.path)), [
    { path: "/tmp/rep/one", replacedCount: 2 },
    { path: "/tmp/rep/two", replacedCount: 0 },
  ]);
  assert.equal(await sb.files.readFile("/tmp/rep/one"), "bba", "non-overlapping occurrences");
  assert.equal(await sb.files.readFile("/tmp/rep/two"), "nothing here");
  await rejectsWith(sb.files.replaceContentsDetailed([{ path: "/tmp/rep/one", oldContent: "", newContent: "x" }]), 400, "an empty old");
  await rejectsWith(sb.files.replaceContentsDetailed([{ path: "/tmp/rep/none", oldContent: "a", newContent: "x" }]), 404, "a missing file");
});

test("isolation: capabilities say unavailable, a session is refused", TEST_TIMEOUT, async () => {
  const caps = await sb.isolation.capabilities();
  assert.equal(caps.available, false);
  assert.match(caps.message, /not available/);
  await assert.rejects(sb.isolation.create({ workspace: { path: "/tmp" } }), /503/);
});

test("renew may shorten an expiry, never past max_sandbox_timeout_seconds", TEST_TIMEOUT, async () => {
  const box = await Sandbox.create({
    connectionConfig: connectionConfig(),
    image: BUSYBOX,
    entrypoint: ["tail", "-f", "/dev/null"],
    timeoutSeconds: 1800,
    resource: { cpu: "1", memory: "256Mi" },
  });
  try {
    const before = (await box.getInfo()).expiresAt.getTime();
    const asked = Date.now() + 300_000;
    await box.renew(300);
    const after = (await box.getInfo()).expiresAt.getTime();
    assert.ok(after < before, `expiresAt ${new Date(after).toISOString()} is not earlier than ${new Date(before).toISOString()}`);
    assert.ok(Math.abs(after - asked) < 60_000, `expiresAt ${new Date(after).toISOString()} is not the time asked, ${new Date(asked).toISOString()}`);
    await rejectsWith(box.renew(7200), 400, "a renewal beyond max_sandbox_timeout_seconds");
    await rejectsWith(box.renew(-60), 400, "a renewal into the past");
    assert.equal((await box.getInfo()).expiresAt.getTime(), after, "refused renewals change nothing");
  } finally {
    await destroy(box);
  }
});

test("a missing entrypoint fails the create with the reason", TEST_TIMEOUT, async () => {
  const msg = await rejectsWith(
    Sandbox.create({
      connectionConfig: connectionConfig(),
      image: BUSYBOX,
      entrypoint: ["/opt/wrong/path.sh"],
      timeoutSeconds: 600,
      resource: { cpu: "1", memory: "256Mi" },
    }),
    500,
    "create with a missing entrypoint",
  );
  assert.match(msg, /\/opt\/wrong\/path\.sh/);
  assert.match(msg, /exited with code 127/);
});
