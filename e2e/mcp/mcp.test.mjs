// sandboxd's MCP tools driven by the official MCP TypeScript SDK as the
// client, over the transport MCP_TRANSPORT names: "stdio" (`sandboxd mcp`
// as a subprocess, a client of the server) or "http" (the server's /mcp).
// The Go harness (e2e/mcp_test.go) starts sandboxd and passes SANDBOXD_URL,
// SANDBOXD_DOMAIN, SANDBOXD_API_KEY, SANDBOXD_BIN and
// SANDBOXD_FOREIGN_ID (a sandbox of another sandboxd instance).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const BUSYBOX = "sandboxd-test/busybox:latest";
const CODE_INTERPRETER = "opensandbox/code-interpreter:v1.1.0";
const TIMEOUT = { timeout: 240_000 };

function env(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run this file through the Go e2e harness`);
  return v;
}

const transportName = env("MCP_TRANSPORT");

function newTransport() {
  if (transportName === "stdio") {
    return new StdioClientTransport({
      command: env("SANDBOXD_BIN"),
      args: ["mcp", "--domain", env("SANDBOXD_DOMAIN")],
      // Only the key and what a process needs: the client passes no more.
      env: { PATH: process.env.PATH, HOME: process.env.HOME, OPEN_SANDBOX_API_KEY: env("SANDBOXD_API_KEY") },
      stderr: "inherit",
    });
  }
  return new StreamableHTTPClientTransport(new URL("/mcp", env("SANDBOXD_URL")), {
    requestInit: { headers: { Authorization: `Bearer ${env("SANDBOXD_API_KEY")}` } },
  });
}

let client;
const requestOptions = { timeout: 180_000 };

// call calls a tool and returns its result; a protocol error throws.
async function call(name, args) {
  return client.callTool({ name, arguments: args }, undefined, requestOptions);
}

// ok calls a tool that must succeed and returns its structured content.
async function ok(name, args) {
  const res = await call(name, args);
  assert.ok(!res.isError, `${name} failed: ${JSON.stringify(res.content)}`);
  return res.structuredContent;
}

const textOf = (res) => res.content.filter((c) => c.type === "text").map((c) => c.text).join("\n");

before(async () => {
  client = new Client({ name: "sandboxd-e2e", version: "1.0.0" });
  await client.connect(newTransport());
});

after(async () => {
  await client?.close();
});

test(`${transportName}: initialize and list the tools`, async () => {
  const info = client.getServerVersion();
  assert.equal(info.name, "sandboxd");
  assert.ok(client.getServerCapabilities().tools, "the server offers tools");
  assert.match(client.getInstructions(), /sandbox_create/);
  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name);
  for (const want of [
    "sandbox_create", "sandbox_kill", "sandbox_get_info", "sandbox_list", "command_run", "file_read", "file_write",
    "code_run", "sandbox_pause", "sandbox_resume", "sandbox_get_endpoint", "file_upload", "file_download", "snapshot_create",
  ]) {
    assert.ok(names.includes(want), `tool ${want} in ${names}`);
  }
  for (const t of tools) {
    assert.ok(t.description.length > 40, `${t.name} has a description for a model`);
    assert.equal(t.inputSchema.type, "object");
  }
});

test(`${transportName}: a code-interpreter sandbox: commands, files, code, images, endpoint, pause and resume, kill`, TIMEOUT, async () => {
  const created = await ok("sandbox_create", {
    image: CODE_INTERPRETER,
    entrypoint: ["/opt/code-interpreter/code-interpreter.sh"],
    timeout_seconds: 600,
    resource: { cpu: "1", memory: "1Gi" },
    metadata: { suite: `mcp-${transportName}` },
  });
  const id = created.sandbox_id;
  assert.ok(id);
  assert.equal(created.info.status.state, "Running");
  try {
    // A command: its output and exit code.
    let ex = await ok("command_run", { sandbox_id: id, command: "echo hello; echo oops >&2; exit 3" });
    assert.equal(ex.exit_code, 3);
    assert.equal(ex.logs.stdout[0].text, "hello\n");
    assert.equal(ex.logs.stderr[0].text, "oops\n");
    assert.equal(ex.error.value, "3");
    ex = await ok("command_run", { sandbox_id: id, command: "echo $GREETING; pwd", env: { GREETING: "hi" }, working_directory: "/tmp" });
    assert.equal(ex.exit_code, 0);
    assert.equal(ex.logs.stdout[0].text, "hi\n/tmp\n");

    // A text file and a binary file, written and read back.
    await ok("file_write", { sandbox_id: id, path: "/tmp/mcp/hello.txt", content: "héllo\nwörld\n" });
    let read = await ok("file_read", { sandbox_id: id, path: "/tmp/mcp/hello.txt" });
    assert.equal(read.content, "héllo\nwörld\n");
    read = await ok("file_read", { sandbox_id: id, path: "/tmp/mcp/hello.txt", range_header: "bytes=7-" });
    assert.equal(read.content, "wörld\n");
    const bin = Buffer.alloc(70000);
    for (let i = 0; i < bin.length; i++) bin[i] = (i * 7) % 256;
    const up = await ok("file_upload", { sandbox_id: id, path: "/tmp/mcp/bin.dat", data_base64: bin.toString("base64") });
    assert.equal(up.size, bin.length);
    ex = await ok("command_run", { sandbox_id: id, command: "wc -c < /tmp/mcp/bin.dat" });
    assert.equal(ex.logs.stdout[0].text.trim(), String(bin.length));
    const parts = [];
    for (let offset = 0; ; ) {
      const d = await ok("file_download", { sandbox_id: id, path: "/tmp/mcp/bin.dat", offset, max_bytes: 32768 });
      assert.equal(d.total_size, bin.length);
      parts.push(Buffer.from(d.content_base64, "base64"));
      if (!d.truncated) break;
      offset += d.size;
    }
    assert.ok(Buffer.concat(parts).equals(bin), "downloaded bytes equal the uploaded ones");

    // Code in one context, twice: the state is kept.
    const first = await ok("code_run", { sandbox_id: id, code: "x = 41\nprint('set')" });
    assert.ok(first.context_id, "a context id is returned");
    assert.equal(first.stdout, "set\n");
    const second = await ok("code_run", { sandbox_id: id, code: "x + 1", context_id: first.context_id });
    assert.equal(second.context_id, first.context_id);
    assert.equal(second.results[0]["text/plain"], "42");

    // A figure comes back as MCP image content.
    const plot = await call("code_run", {
      sandbox_id: id,
      context_id: first.context_id,
      code: "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()",
    });
    assert.ok(!plot.isError, textOf(plot));
    const images = plot.content.filter((c) => c.type === "image");
    assert.equal(images.length, 1, JSON.stringify(plot.content).slice(0, 500));
    assert.equal(images[0].mimeType, "image/png");
    assert.ok(Buffer.from(images[0].data, "base64").subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])), "a PNG");

    // An exception is a tool error with its traceback.
    const boom = await call("code_run", { sandbox_id: id, context_id: first.context_id, code: "def f():\n    return 1 / 0\nf()" });
    assert.equal(boom.isError, true);
    assert.match(textOf(boom), /ZeroDivisionError: division by zero/);
    assert.match(textOf(boom), /return 1 \/ 0/);

    // The endpoint of a port: a URL that reaches a server in the sandbox.
    await ok("file_write", { sandbox_id: id, path: "/tmp/www/index.html", content: "from the sandbox" });
    const server = await ok("command_run", { sandbox_id: id, command: "cd /tmp/www && exec python3 -u -m http.server 8000", background: true });
    assert.ok(server.id, "a background command returns its id");
    const ep = await ok("sandbox_get_endpoint", { sandbox_id: id, port: 8000 });
    assert.match(ep.url, /^http:\/\/.*\/sandboxes\/.*\/proxy\/8000$/);
    let body = "";
    for (let i = 0; i < 100 && body !== "from the sandbox"; i++) {
      const res = await fetch(ep.url + "/index.html", { headers: ep.headers });
      body = res.ok ? await res.text() : "";
      if (!res.ok) await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(body, "from the sandbox");

    // The background command's output, read by cursor, then stopped.
    let logs = await ok("command_logs", { sandbox_id: id, execution_id: server.id });
    for (let i = 0; i < 100 && !logs.output.includes("GET /index.html"); i++) {
      await new Promise((r) => setTimeout(r, 100));
      logs = await ok("command_logs", { sandbox_id: id, execution_id: server.id });
    }
    assert.match(logs.output, /GET \/index.html/);
    assert.equal(logs.running, true);
    const later = await ok("command_logs", { sandbox_id: id, execution_id: server.id, cursor: logs.next_cursor });
    assert.ok(!later.output.includes("GET /index.html"), "a cursor reads only what came after it");
    assert.deepEqual(await ok("command_interrupt", { sandbox_id: id, execution_id: server.id }), { status: "interrupted" });
    for (let i = 0; i < 100 && logs.running; i++) {
      await new Promise((r) => setTimeout(r, 100));
      logs = await ok("command_logs", { sandbox_id: id, execution_id: server.id });
    }
    assert.equal(logs.running, false);

    // Pause and resume.
    assert.deepEqual(await ok("sandbox_pause", { sandbox_id: id }), { status: "paused", state: "Paused" });
    assert.equal((await ok("sandbox_get_info", { sandbox_id: id })).status.state, "Paused");
    assert.deepEqual(await ok("sandbox_resume", { sandbox_id: id }), { status: "resumed", state: "Running" });
    ex = await ok("command_run", { sandbox_id: id, command: "echo back" });
    assert.equal(ex.logs.stdout[0].text, "back\n");
  } finally {
    assert.deepEqual(await ok("sandbox_kill", { sandbox_id: id }), { status: "killed" });
  }
  const gone = await call("sandbox_get_info", { sandbox_id: id });
  assert.equal(gone.isError, true);
  assert.match(textOf(gone), /404/);
});

test(`${transportName}: bad arguments are tool errors, not protocol errors`, async () => {
  for (const [name, args, want] of [
    ["command_run", { sandbox_id: "x", command: 5 }, /command/],
    ["command_run", { command: "ls" }, /sandbox_id/],
    ["file_upload", { sandbox_id: "x", path: "/a", data_base64: "!!" }, /base64/],
    ["sandbox_create", { image: BUSYBOX, auth_username: "u" }, /together/],
    ["sandbox_get_info", { sandbox_id: "no-such-sandbox" }, /404/],
  ]) {
    const res = await call(name, args);
    assert.equal(res.isError, true, `${name} ${JSON.stringify(args)}`);
    assert.match(textOf(res), want);
  }
  // The server is still there.
  assert.ok((await client.listTools()).tools.length > 0);
});

test(`${transportName}: create goes through the server's checks: a host path not allowed is refused`, async () => {
  const res = await call("sandbox_create", {
    image: BUSYBOX,
    volumes: [{ name: "etc", mountPath: "/host-etc", host: { path: "/etc" } }],
  });
  assert.equal(res.isError, true);
  assert.match(textOf(res), /VOLUME::HOST_PATH_NOT_ALLOWED/);
});

test(`${transportName}: another instance's sandbox cannot be named`, async () => {
  const foreign = env("SANDBOXD_FOREIGN_ID");
  for (const [name, args] of [
    ["sandbox_get_info", { sandbox_id: foreign }],
    ["command_run", { sandbox_id: foreign, command: "echo reached" }],
    ["file_read", { sandbox_id: foreign, path: "/etc/hostname" }],
    ["sandbox_kill", { sandbox_id: foreign }],
  ]) {
    const res = await call(name, args);
    assert.equal(res.isError, true, `${name} reached another instance's sandbox: ${textOf(res)}`);
    assert.match(textOf(res), /HTTP 404/);
  }
  const { sandbox_infos } = await ok("sandbox_list", {});
  assert.ok(!sandbox_infos.some((s) => s.id === foreign), "the list holds no sandbox of another instance");
});

test(`${transportName}: snapshot a sandbox and restore it`, TIMEOUT, async () => {
  const { sandbox_id: id } = await ok("sandbox_create", { image: BUSYBOX, resource: { cpu: "1", memory: "256Mi" } });
  let restored;
  let snap;
  try {
    await ok("file_write", { sandbox_id: id, path: "/tmp/kept.txt", content: "kept" });
    snap = await ok("snapshot_create", { sandbox_id: id, name: "mcp" });
    for (let i = 0; i < 600 && snap.status.state === "Creating"; i++) {
      await new Promise((r) => setTimeout(r, 100));
      snap = await ok("snapshot_get", { snapshot_id: snap.id });
    }
    assert.equal(snap.status.state, "Ready", JSON.stringify(snap));
    assert.ok((await ok("snapshot_list", { sandbox_id: id })).snapshots.some((s) => s.id === snap.id));
    restored = (await ok("snapshot_restore", { snapshot_id: snap.id })).sandbox_id;
    const read = await ok("file_read", { sandbox_id: restored, path: "/tmp/kept.txt" });
    assert.equal(read.content, "kept");
  } finally {
    if (restored) await ok("sandbox_kill", { sandbox_id: restored });
    await ok("sandbox_kill", { sandbox_id: id });
    if (snap) await ok("snapshot_delete", { snapshot_id: snap.id });
  }
});
