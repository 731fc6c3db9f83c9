// Line mode and byte ranges of /files/download through the official
// TypeScript SDK (readFile with offset and limit, readBytes with a range),
// served by the sandbox's agent: upstream's JS e2e 03a, and execd-1.1.md
// §1.2's rules on \r, empty lines and the end of the file.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { SandboxApiException } from "@alibaba-group/opensandbox";
import { TEST_TIMEOUT, createSandbox, destroy } from "./lib.mjs";

let sb;
before(async () => {
  sb = await createSandbox();
  await sb.files.writeFiles([
    { path: "/tmp/lines/five.txt", data: "line1\nline2\nline3\nline4\nline5" },
    { path: "/tmp/lines/crlf.txt", data: "a\r\nb\r\r\n\nc\rd\r\n" },
  ]);
});
after(async () => {
  await destroy(sb);
});

test("offset and limit select lines, joined without a trailing newline (03a)", TEST_TIMEOUT, async () => {
  const p = "/tmp/lines/five.txt";
  assert.equal(await sb.files.readFile(p, { offset: 2, limit: 2 }), "line2\nline3");
  assert.equal(await sb.files.readFile(p, { offset: 4 }), "line4\nline5");
  assert.equal(await sb.files.readFile(p, { limit: 2 }), "line1\nline2");
  assert.equal(await sb.files.readFile(p, { offset: 6 }), "", "past the end: empty");
  assert.equal(await sb.files.readFile(p), "line1\nline2\nline3\nline4\nline5", "without them: the bytes");
});

test("trailing \\r and \\n runs are stripped, inner \\r kept, empty lines counted", TEST_TIMEOUT, async () => {
  assert.equal(await sb.files.readFile("/tmp/lines/crlf.txt", { offset: 1 }), "a\nb\n\nc\rd");
  assert.equal(await sb.files.readFile("/tmp/lines/crlf.txt", { offset: 3, limit: 1 }), "");
});

test("byte ranges, and ranges with line mode refused", TEST_TIMEOUT, async () => {
  const p = "/tmp/lines/five.txt";
  assert.equal(await sb.files.readFile(p, { range: "bytes=6-10" }), "line2");
  assert.equal(await sb.files.readFile(p, { range: "bytes=-5" }), "line5");
  await assert.rejects(sb.files.readFile(p, { offset: 1, range: "bytes=0-1" }), (err) => {
    assert.ok(err instanceof SandboxApiException, `unexpected error ${err}`);
    assert.equal(err.statusCode, 400);
    return true;
  });
  await assert.rejects(sb.files.readFile("/tmp/lines/missing.txt", { offset: 1 }), (err) => {
    assert.ok(err instanceof SandboxApiException, `unexpected error ${err}`);
    assert.equal(err.statusCode, 404);
    return true;
  });
});
