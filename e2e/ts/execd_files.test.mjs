// Files through the official TypeScript SDK: uploads and downloads (served by
// the sandbox's agent), and the agent's info, permissions,
// search, replace, move, delete and directory routes. One code-interpreter
// sandbox serves every test.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { SandboxApiException } from "@alibaba-group/opensandbox";
import { TEST_TIMEOUT, createSandbox, destroy, mustRun } from "./lib.mjs";

let sb;
before(async () => {
  sb = await createSandbox();
});
after(async () => {
  await destroy(sb);
});

// rejectsWith expects an SDK call to fail with an HTTP status.
async function rejectsWith(promise, status, what) {
  await assert.rejects(promise, (err) => {
    assert.ok(err instanceof SandboxApiException, `${what}: unexpected error ${err}`);
    assert.equal(err.statusCode, status, `${what}: status`);
    return true;
  });
}

const sha256 = (data) => createHash("sha256").update(data).digest("hex");

test("a 10 MiB binary file round trips byte for byte", TEST_TIMEOUT, async () => {
  const data = randomBytes(10 << 20);
  const path = "/tmp/files/new/parents/big.bin"; // parents do not exist yet
  await sb.files.writeFiles([{ path, data, mode: 600 }]);
  // What landed in the sandbox, seen from inside.
  assert.deepEqual(await mustRun(sb, `sha256sum ${path} | cut -d' ' -f1; stat -c '%s %a' ${path}`), [
    sha256(data),
    `${data.length} 600`,
  ]);
  const back = await sb.files.readBytes(path);
  assert.equal(back.length, data.length);
  assert.ok(Buffer.from(back).equals(data), "downloaded bytes equal uploaded bytes");

  const info = (await sb.files.getFileInfo([path]))[path];
  assert.equal(info.type, "file");
  assert.equal(info.size, data.length);
  assert.equal(info.mode, 600);
  assert.ok(info.modifiedAt instanceof Date && !Number.isNaN(info.modifiedAt.getTime()));
});

test("empty files, overwrites and non-ASCII names", TEST_TIMEOUT, async () => {
  const empty = "/tmp/files/empty";
  await sb.files.writeFiles([{ path: empty, data: new Uint8Array(0) }]);
  assert.equal((await sb.files.readBytes(empty)).length, 0);
  assert.equal((await sb.files.getFileInfo([empty]))[empty].size, 0);

  const path = "/tmp/files/ünï cödé ✓.txt";
  await sb.files.writeFiles([{ path, data: "a much longer first version\n" }]);
  await sb.files.writeFiles([{ path, data: "short\n" }]);
  assert.equal(await sb.files.readFile(path), "short\n", "an upload truncates the old content");
  assert.deepEqual(await mustRun(sb, "ls /tmp/files | sort"), ["empty", "new", "ünï cödé ✓.txt"]);
});

test("info on a directory, a missing path, and a chmod 000 file", TEST_TIMEOUT, async () => {
  await mustRun(sb, "mkdir -p /tmp/info/dir && echo x > /tmp/info/locked && chmod 000 /tmp/info/locked");
  const infos = await sb.files.getFileInfo(["/tmp/info/dir", "/tmp/info/locked"]);
  assert.equal(infos["/tmp/info/dir"].type, "directory");
  assert.equal(infos["/tmp/info/locked"].type, "file");
  assert.equal(infos["/tmp/info/locked"].mode, 0);
  assert.equal(infos["/tmp/info/locked"].owner, "root");

  await rejectsWith(sb.files.getFileInfo(["/tmp/info/missing"]), 404, "info of a missing path");
  await rejectsWith(sb.files.getFileInfo(["/tmp/info/dir", "/tmp/info/missing"]), 404, "info with one missing path");
  await rejectsWith(sb.files.readBytes("/tmp/info/missing"), 404, "download of a missing path");
  // A directory or a FIFO is not a file: a clean 400, not a broken 200 (or a hang).
  await mustRun(sb, "mkfifo /tmp/info/fifo");
  await rejectsWith(sb.files.readBytes("/tmp/info/dir"), 400, "download of a directory");
  await rejectsWith(sb.files.readBytes("/tmp/info/fifo"), 400, "download of a FIFO");
});

test("set permissions", TEST_TIMEOUT, async () => {
  const path = "/tmp/perm.txt";
  await sb.files.writeFiles([{ path, data: "p" }]);
  await sb.files.setPermissions([{ path, mode: 640, owner: "nobody", group: "nogroup" }]);
  assert.deepEqual(await mustRun(sb, `stat -c '%a %U %G' ${path}`), ["640 nobody nogroup"]);
  const info = (await sb.files.getFileInfo([path]))[path];
  assert.equal(info.mode, 640);
  assert.equal(info.owner, "nobody");
  assert.equal(info.group, "nogroup");
});

test("search by base-name glob", TEST_TIMEOUT, async () => {
  for (const p of ["a.txt", "b.py", "sub/c.txt", "sub/deeper/d.txt", "sub/e.md", "x.txt.bak"]) {
    await sb.files.writeFiles([{ path: `/tmp/search/${p}`, data: p }]);
  }
  const found = await sb.files.search({ path: "/tmp/search", pattern: "*.txt" });
  assert.deepEqual(found.map((f) => f.path).sort(), ["/tmp/search/a.txt", "/tmp/search/sub/c.txt", "/tmp/search/sub/deeper/d.txt"]);
  for (const f of found) {
    assert.equal(f.type, "file");
    assert.equal(f.size, f.path.length - "/tmp/search/".length);
  }
  const braces = await sb.files.search({ path: "/tmp/search", pattern: "*.{py,md}" });
  assert.deepEqual(braces.map((f) => f.path).sort(), ["/tmp/search/b.py", "/tmp/search/sub/e.md"]);
  assert.deepEqual(await sb.files.search({ path: "/tmp/search", pattern: "*.none" }), []);
  await rejectsWith(sb.files.search({ path: "/tmp/no-such-dir", pattern: "*" }), 404, "search in a missing directory");
});

test("replace contents", TEST_TIMEOUT, async () => {
  const path = "/tmp/replace.txt";
  await sb.files.writeFiles([{ path, data: "hello world, hello sandbox\nsecond hello\n" }]);
  await sb.files.replaceContents([{ path, oldContent: "hello", newContent: "bye" }]);
  assert.equal(await sb.files.readFile(path), "bye world, bye sandbox\nsecond bye\n");
  const counts = await sb.files.replaceContentsDetailed([{ path, oldContent: "bye", newContent: "hi" }]);
  assert.deepEqual(counts, [{ path, replacedCount: 3 }]);
  assert.equal(await sb.files.readFile(path), "hi world, hi sandbox\nsecond hi\n");
  await rejectsWith(sb.files.replaceContents([{ path: "/tmp/no-such-file", oldContent: "a", newContent: "b" }]), 404, "replace in a missing file");
});

test("move and delete files", TEST_TIMEOUT, async () => {
  const src = "/tmp/mv/src.txt";
  const dest = "/tmp/mv/into/new/dir/dest.txt";
  await sb.files.writeFiles([{ path: src, data: "moving" }]);
  await sb.files.moveFiles([{ src, dest }]);
  assert.equal(await sb.files.readFile(dest), "moving");
  await rejectsWith(sb.files.getFileInfo([src]), 404, "info of the moved source");

  await sb.files.deleteFiles([dest]);
  await rejectsWith(sb.files.getFileInfo([dest]), 404, "info of a deleted file");
  // Deleting what does not exist is not an error.
  await sb.files.deleteFiles([dest]);
});

test("create, list and delete directories", TEST_TIMEOUT, async () => {
  await sb.files.createDirectories([{ path: "/tmp/dirs/a/b", mode: 700 }, { path: "/tmp/dirs/c" }]);
  await sb.files.writeFiles([{ path: "/tmp/dirs/a/file.txt", data: "f" }]);
  const infos = await sb.files.getFileInfo(["/tmp/dirs/a/b", "/tmp/dirs/c"]);
  assert.equal(infos["/tmp/dirs/a/b"].type, "directory");
  assert.equal(infos["/tmp/dirs/a/b"].mode, 700);
  assert.equal(infos["/tmp/dirs/c"].mode, 755, "the SDK's default mode");

  const top = await sb.files.listDirectory({ path: "/tmp/dirs", depth: 1 });
  assert.deepEqual(top.map((f) => [f.path, f.type]), [["/tmp/dirs/a", "directory"], ["/tmp/dirs/c", "directory"]]);
  const all = await sb.files.listDirectory({ path: "/tmp/dirs", depth: 3 });
  assert.deepEqual(all.map((f) => f.path).sort(), ["/tmp/dirs/a", "/tmp/dirs/a/b", "/tmp/dirs/a/file.txt", "/tmp/dirs/c"]);
  await rejectsWith(sb.files.listDirectory({ path: "/tmp/dirs/missing", depth: 1 }), 404, "list of a missing directory");

  await sb.files.deleteDirectories(["/tmp/dirs/a"]);
  assert.deepEqual((await sb.files.listDirectory({ path: "/tmp/dirs", depth: 1 })).map((f) => f.path), ["/tmp/dirs/c"]);
  await sb.files.deleteDirectories(["/tmp/dirs"]);
  await rejectsWith(sb.files.getFileInfo(["/tmp/dirs"]), 404, "info of a deleted directory");
});

test("download a byte range with the SDK", TEST_TIMEOUT, async () => {
  const path = "/tmp/range.txt";
  await sb.files.writeFiles([{ path, data: "0123456789abcdef" }]);
  assert.equal(await sb.files.readFile(path, { range: "bytes=4-7" }), "4567");
  assert.equal(await sb.files.readFile(path, { range: "bytes=-3" }), "def");
});
