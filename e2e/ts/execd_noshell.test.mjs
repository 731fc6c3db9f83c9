// An image with no shell at all: the sandbox, its health check and its files
// work; a command fails with an error event instead of hanging.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { NOSHELL, TEST_TIMEOUT, createSandbox, destroy, stdoutOf } from "./lib.mjs";

let sb;
before(async () => {
  // Sandbox.create polls /ping until it answers.
  sb = await createSandbox({ image: NOSHELL, entrypoint: ["/pause"], resource: { cpu: "1", memory: "256Mi" } });
});
after(async () => {
  await destroy(sb);
});

test("create and ping", TEST_TIMEOUT, async () => {
  assert.equal((await sb.getInfo()).status.state, "Running");
  assert.equal(await sb.isHealthy(), true);
});

test("files upload, download and info", TEST_TIMEOUT, async () => {
  const data = randomBytes(300_000);
  await sb.files.writeFiles([
    { path: "/data/blob.bin", data },
    { path: "/data/sub/note.txt", data: "no shell needed\n" },
  ]);
  assert.ok(Buffer.from(await sb.files.readBytes("/data/blob.bin")).equals(data));
  assert.equal(await sb.files.readFile("/data/sub/note.txt"), "no shell needed\n");
  const info = await sb.files.getFileInfo(["/data/blob.bin", "/data/sub"]);
  assert.equal(info["/data/blob.bin"].size, data.length);
  assert.equal(info["/data/sub"].type, "directory");
});

test("a command ends with an error event", TEST_TIMEOUT, async () => {
  for (const background of [false, true]) {
    const ex = await sb.commands.run("echo hi", { background });
    assert.ok(ex.error, `background=${background}: an error event`);
    assert.match(ex.error.value, /shell/, `background=${background}: the error says why`);
    assert.equal(ex.complete, undefined, `background=${background}: no execution_complete`);
    assert.deepEqual(stdoutOf(ex), []);
    if (!background) assert.equal(ex.exitCode, null, "no exit code: the command never ran");
  }
});
