// The port proxy: a server started in a sandbox is reached through
// /sandboxes/{id}/proxy/{port}/ with the endpoint the SDK resolves, also in a
// sandbox whose network policy denies everything (networkPolicy deny).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { TEST_TIMEOUT, createSandbox, destroy, mustRun } from "./lib.mjs";

// A server that answers POST and PUT with what it received.
const ECHO_SERVER = `
import http.server, json
class Echo(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        out = json.dumps({"method": self.command, "path": self.path, "body": body.decode(),
                          "headers": {k.lower(): v for k, v in self.headers.items()}}).encode()
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    do_PUT = do_POST
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", 8001), Echo).serve_forever()
`;

let open, closed;
before(async () => {
  [open, closed] = await Promise.all([createSandbox(), createSandbox({ networkPolicy: { defaultAction: "deny" } })]);
});
after(async () => {
  await Promise.all([destroy(open), destroy(closed)]);
});

// fetchWhenUp fetches url until the server behind the proxy answers: the
// proxy says 502 while nothing listens yet.
async function fetchWhenUp(url, init) {
  for (let i = 0; i < 600; i++) {
    const res = await fetch(url, init);
    if (res.status !== 502) return res;
    await res.arrayBuffer();
    await sleep(100);
  }
  assert.fail(`${url} never came up`);
}

async function checkProxy(sb) {
  const root = `/sandboxes/${sb.id}/proxy`;
  await sb.files.writeFiles([
    { path: "/tmp/www/hello.txt", data: `hello from ${sb.id}\n` },
    { path: "/tmp/echo.py", data: ECHO_SERVER },
  ]);
  const http = await sb.commands.run("python3 -m http.server 8000", { background: true, workingDirectory: "/tmp/www" });
  const echo = await sb.commands.run("python3 /tmp/echo.py", { background: true });
  try {
    const ep = await sb.getEndpoint(8000);
    assert.ok(ep.endpoint.endsWith(`${root}/8000`), `endpoint ${ep.endpoint}`);
    const res = await fetchWhenUp(`http://${ep.endpoint}/hello.txt`, { headers: ep.headers });
    assert.equal(res.status, 200);
    assert.equal(await res.text(), `hello from ${sb.id}\n`);
    const listing = await fetch(`http://${ep.endpoint}/`, { headers: ep.headers });
    assert.equal(listing.status, 200);
    assert.match(await listing.text(), /hello\.txt/);

    // Method, path, query and body are forwarded; the caller's credentials are not.
    const ep2 = await sb.getEndpoint(8001);
    const posted = await fetchWhenUp(`http://${ep2.endpoint}/some/path?q=a%20b&r=1`, {
      method: "POST",
      headers: { ...ep2.headers, "Content-Type": "text/plain", "X-Custom": "kept" },
      body: "payload ✓",
    });
    assert.equal(posted.status, 201);
    const seen = await posted.json();
    assert.equal(seen.method, "POST");
    assert.equal(seen.path, "/some/path?q=a%20b&r=1");
    assert.equal(seen.body, "payload ✓");
    assert.equal(seen.headers["x-custom"], "kept");
    for (const h of Object.keys(ep2.headers).concat(["open-sandbox-api-key"])) {
      assert.equal(seen.headers[h.toLowerCase()], undefined, `${h} reached the sandbox`);
    }

    const anonymous = await fetch(`http://${ep.endpoint}/hello.txt`);
    assert.equal(anonymous.status, 401, "no credentials, no proxy");
    await anonymous.arrayBuffer();
    const nothing = await fetch(`http://${(await sb.getEndpoint(8009)).endpoint}/`, { headers: ep.headers });
    assert.equal(nothing.status, 502, "nothing listens on 8009");
    await nothing.arrayBuffer();
  } finally {
    await Promise.all([sb.commands.interrupt(http.id), sb.commands.interrupt(echo.id)]);
  }
}

test("a server in the sandbox is reached through the port proxy", TEST_TIMEOUT, async () => {
  await checkProxy(open);
});

test("without network: commands and the port proxy still work", TEST_TIMEOUT, async () => {
  // Deny-all is enforced by the sandbox's egress helper (so that a PATCH can
  // open it later); TestSecurityNetworkDeny and TestEgress* prove that
  // nothing is reachable. Here: the policy is in force, and the proxy, which
  // does not use the sandbox's network, still works.
  assert.equal((await closed.getEgressPolicy()).defaultAction, "deny", "the sandbox's policy denies all");
  assert.deepEqual(await mustRun(open, "ls /sys/class/net | grep -cv '^lo$'"), ["1"], "the other sandbox has a network");
  await checkProxy(closed);
});
