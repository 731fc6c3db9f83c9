// The file operations of LangChain Deep Agents' BaseSandbox, done its way:
// every operation is one command (python3 -c scripts whose parameters are
// base64 inside the script text and that print JSON, heredocs, grep -Z),
// and the output is rebuilt as the deepagents-opensandbox-backend does:
// stdout events joined with "\n", then stderr. These scripts are our own
// fixtures exercising the same features (reference deepagents-contract.md §2).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { TEST_TIMEOUT, createSandbox, destroy } from "./lib.mjs";

const ROOT = "/workspace/proj";

// The project the agent works on, by how each file gets there.
const HEREDOC_FILES = {
  "src/app.py": "import os\n\ndef main():\n    return needle(1)  # call: needle(\n",
  "notes.txt": "needle( in notes, not a .py file\n",
};
const BASE64_HEREDOC_FILES = {
  "src/util/helpers.py": "def needle(x):\n    return x\n\nNEEDLE = 'needle( upper: yes'\n",
  "data/big.txt": Array.from({ length: 3000 }, (_, i) => `line ${i}: ünï ✓ "q" \\ ${"x".repeat(i % 200)}${i % 1000 === 999 ? "y".repeat(50_000) : ""}`).join("\n") + "\n",
};
const UPLOADED_FILES = {
  "docs/read me.md": "# Read me\nneedle( in markdown\n",
  "docs/ünïcode ✓.py": 's = "naïve needle( ✓"\n',
};
const ALL_TEXT = { ...HEREDOC_FILES, ...BASE64_HEREDOC_FILES, ...UPLOADED_FILES };
const BLOB = randomBytes(300_000);

let sb;

// execute runs a command and rebuilds the backend's ExecuteResponse.
async function execute(command) {
  const ex = await sb.commands.run(command);
  const parts = [];
  const out = ex.logs.stdout.map((m) => m.text).join("\n");
  const err = ex.logs.stderr.map((m) => m.text).join("\n");
  if (out) parts.push(out);
  if (err) parts.push(err);
  return { output: parts.join("\n"), exitCode: ex.exitCode };
}

// executeOK is execute for commands that must succeed.
async function executeOK(command) {
  const res = await execute(command);
  assert.equal(res.exitCode, 0, `exit code of ${command.slice(0, 120)}…: output ${res.output.slice(0, 500)}`);
  return res.output;
}

const b64 = (v) => Buffer.from(typeof v === "string" ? v : JSON.stringify(v)).toString("base64");
// sq quotes a string for the shell.
const sq = (s) => `'${s.replaceAll("'", `'\\''`)}'`;
// python builds `python3 -c <script>` with params base64-encoded in the script.
const python = (script, params) => `python3 -c ${sq(script.replace("%PARAMS%", b64(params)))}`;

// pyDumps formats a flat object like Python's json.dumps (", " and ": "
// separators, non-ASCII escaped).
function pyDumps(obj) {
  const val = (v) =>
    typeof v === "string" ? JSON.stringify(v).replace(/[^\x20-\x7e]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`) : JSON.stringify(v);
  return `{${Object.entries(obj).map(([k, v]) => `${val(k)}: ${val(v)}`).join(", ")}}`;
}

const LS = `
import base64, json, os
path = json.loads(base64.b64decode("%PARAMS%"))["path"]
try:
    entries = sorted(os.scandir(path), key=lambda e: e.name)
except FileNotFoundError:
    print(json.dumps({"error": "path_not_found"}))
except NotADirectoryError:
    print(json.dumps({"error": "not_a_directory"}))
else:
    for e in entries:
        print(json.dumps({"path": os.path.join(path, e.name), "is_dir": e.is_dir(follow_symlinks=False)}))
`;

const READ = `
import base64, json, sys
p = json.loads(base64.b64decode("%PARAMS%"))
try:
    with open(p["path"], "rb") as f:
        raw = f.read()
except FileNotFoundError:
    print(json.dumps({"error": "file_not_found"}))
    sys.exit(0)
if p["file_type"] != "text":
    print(json.dumps({"encoding": "base64", "content": base64.b64encode(raw).decode()}))
    sys.exit(0)
lines = raw.decode("utf-8").splitlines()
start, end = p["offset"], min(len(lines), p["offset"] + p["limit"])
if start >= len(lines):
    print(json.dumps({"error": "Line offset %d exceeds file length (%d lines)" % (start, len(lines))}))
    sys.exit(0)
print(json.dumps({"encoding": "utf-8", "content": "\\n".join(lines[start:end]), "total_lines": len(lines),
                  "start_line": start + 1, "end_line": end, "next_offset": end if end < len(lines) else None}))
`;

// EDIT reads its parameters from stdin, which a heredoc provides.
const EDIT = `
import base64, json, sys
p = json.loads(base64.b64decode(sys.stdin.read().strip()))
try:
    with open(p["path"], encoding="utf-8") as f:
        text = f.read()
except FileNotFoundError:
    print(json.dumps({"error": "file_not_found"}))
    sys.exit(0)
n = text.count(p["old"])
if n == 0:
    print(json.dumps({"error": "string_not_found"}))
elif n > 1 and not p["replace_all"]:
    print(json.dumps({"error": "multiple_occurrences", "count": n}))
else:
    with open(p["path"], "w", encoding="utf-8") as f:
        f.write(text.replace(p["old"], p["new"]))
    print(json.dumps({"count": n}))
`;

const GLOB = `
import base64, fnmatch, json, os
p = json.loads(base64.b64decode("%PARAMS%"))
found = []
for dirpath, dirnames, filenames in os.walk(p["path"]):
    for name in filenames:
        full = os.path.join(dirpath, name)
        rel = os.path.relpath(full, p["path"])
        if os.path.isfile(full) and fnmatch.fnmatch(rel, p["pattern"]):
            found.append(rel)
for rel in sorted(found):
    print(json.dumps({"path": rel, "is_dir": False}))
`;

const MKDIR_PARENT = `
import base64, json, os
os.makedirs(os.path.dirname(json.loads(base64.b64decode("%PARAMS%"))["path"]), exist_ok=True)
`;

// WRITE_STDIN is how old Deep Agents wrote files: the whole content, base64,
// through a heredoc.
const WRITE_STDIN = `
import base64, json, os, sys
p = json.loads(base64.b64decode(sys.stdin.read().strip()))
os.makedirs(os.path.dirname(p["path"]), exist_ok=True)
with open(p["path"], "w", encoding="utf-8") as f:
    f.write(p["content"])
`;

const heredoc = (script, payload, delimiter) => `python3 -c ${sq(script)} 2>&1 <<'${delimiter}'\n${b64(payload)}\n${delimiter}\n`;

before(async () => {
  sb = await createSandbox();
  for (const [rel, content] of Object.entries(HEREDOC_FILES)) {
    await executeOK(`mkdir -p "$(dirname ${sq(`${ROOT}/${rel}`)})" && cat > ${sq(`${ROOT}/${rel}`)} <<'__FIXTURE_EOF__'\n${content}__FIXTURE_EOF__`);
  }
  for (const [rel, content] of Object.entries(BASE64_HEREDOC_FILES)) {
    assert.equal(await executeOK(heredoc(WRITE_STDIN, { path: `${ROOT}/${rel}`, content }, "__WRITE_EOF__")), "");
  }
  // New Deep Agents: a preflight command that makes the parent, then an upload.
  const uploads = { ...UPLOADED_FILES, "data/blob.bin": BLOB };
  for (const [rel, data] of Object.entries(uploads)) {
    const out = await executeOK(`${python(MKDIR_PARENT, { path: `${ROOT}/${rel}` })} 2>&1`);
    assert.ok(!out.includes("Error:"), out);
    await sb.files.writeFiles([{ path: `${ROOT}/${rel}`, data, mode: 644 }]);
  }
});
after(async () => {
  await destroy(sb);
});

test("every file arrived byte for byte, whichever way it was written", TEST_TIMEOUT, async () => {
  for (const [rel, content] of Object.entries(ALL_TEXT)) {
    assert.equal(await sb.files.readFile(`${ROOT}/${rel}`), content, rel);
  }
  assert.ok(Buffer.from(await sb.files.readBytes(`${ROOT}/data/blob.bin`)).equals(BLOB));
});

test("ls: JSON lines from os.scandir", TEST_TIMEOUT, async () => {
  const ls = async (path) => executeOK(`${python(LS, { path })} 2>/dev/null`);
  const line = (name, isDir, dir = ROOT) => pyDumps({ path: `${dir}/${name}`, is_dir: isDir });
  assert.equal(await ls(ROOT), [line("data", true), line("docs", true), line("notes.txt", false), line("src", true)].join("\n"));
  assert.equal(await ls(`${ROOT}/docs`), [line("read me.md", false, `${ROOT}/docs`), line("ünïcode ✓.py", false, `${ROOT}/docs`)].join("\n"));
  assert.equal(await ls(`${ROOT}/missing`), '{"error": "path_not_found"}');
  assert.equal(await ls(`${ROOT}/notes.txt`), '{"error": "not_a_directory"}');
});

test("read: one JSON document, text pages and base64", TEST_TIMEOUT, async () => {
  const read = async (params) => JSON.parse((await executeOK(`${python(READ, params)} 2>&1`)).trimEnd());
  const lines = ALL_TEXT["data/big.txt"].split("\n").slice(0, -1);

  const page = await read({ path: `${ROOT}/data/big.txt`, file_type: "text", offset: 100, limit: 2000 });
  assert.equal(page.encoding, "utf-8");
  assert.equal(page.content, lines.slice(100, 2100).join("\n"));
  assert.deepEqual([page.total_lines, page.start_line, page.end_line, page.next_offset], [3000, 101, 2100, 2100]);

  const last = await read({ path: `${ROOT}/data/big.txt`, file_type: "text", offset: 2100, limit: 2000 });
  assert.equal(last.content, lines.slice(2100).join("\n"));
  assert.equal(last.next_offset, null);

  const blob = await read({ path: `${ROOT}/data/blob.bin`, file_type: "image" });
  assert.equal(blob.encoding, "base64");
  assert.ok(Buffer.from(blob.content, "base64").equals(BLOB), "the base64 line decodes to the file");

  assert.deepEqual(await read({ path: `${ROOT}/nope.txt`, file_type: "text", offset: 0, limit: 10 }), { error: "file_not_found" });
  assert.deepEqual(await read({ path: `${ROOT}/notes.txt`, file_type: "text", offset: 5, limit: 10 }), {
    error: "Line offset 5 exceeds file length (1 lines)",
  });
});

test("edit: parameters through a heredoc on stdin", TEST_TIMEOUT, async () => {
  const path = `${ROOT}/src/util/helpers.py`;
  const edit = async (old, replacement, replaceAll = false) =>
    JSON.parse(await executeOK(heredoc(EDIT, { path, old, new: replacement, replace_all: replaceAll }, "__EDIT_EOF__")));

  assert.deepEqual(await edit("def needle(x):\n    return x", "def needle(x):\n    return x * 2  # ✓"), { count: 1 });
  assert.deepEqual(await edit("needle", "pin"), { error: "multiple_occurrences", count: 2 });
  assert.deepEqual(await edit("absent text", "x"), { error: "string_not_found" });
  const expected = ALL_TEXT["src/util/helpers.py"].replace("return x", "return x * 2  # ✓");
  assert.equal(await sb.files.readFile(path), expected);
  assert.deepEqual(await edit("needle", "needle", true), { count: 2 });
  assert.equal(await sb.files.readFile(path), expected);
});

test("glob: JSON lines from os.walk", TEST_TIMEOUT, async () => {
  const glob = async (pattern) => executeOK(`${python(GLOB, { path: ROOT, pattern })} 2>&1`);
  const lines = (rels) => rels.map((rel) => pyDumps({ path: rel, is_dir: false })).join("\n");
  assert.equal(await glob("*.py"), lines(["docs/ünïcode ✓.py", "src/app.py", "src/util/helpers.py"]));
  assert.equal(await glob("data/*"), lines(["data/big.txt", "data/blob.bin"]));
  assert.equal(await glob("*.none"), "");
});

test("grep -rHnFZ: NUL-separated records", TEST_TIMEOUT, async () => {
  const grep = (pattern, include) =>
    executeOK(`grep -rHnFZ ${include ? `--include=${sq(include)} ` : ""}-e ${sq(pattern)} ${sq(ROOT)} 2>/dev/null || true`);
  // The backend's parser: records split on "\n", path before the first NUL,
  // line number before the first ":" after it.
  const parse = (output) =>
    output
      .replace(/\n+$/, "")
      .split("\n")
      .filter((r) => r !== "")
      .map((r) => {
        const nul = r.indexOf("\0");
        assert.ok(nul > 0, `record without a NUL: ${JSON.stringify(r)}`);
        const rest = r.slice(nul + 1);
        const colon = rest.indexOf(":");
        return { path: r.slice(0, nul), line: Number(rest.slice(0, colon)), text: rest.slice(colon + 1) };
      })
      .sort((a, b) => (a.path + a.line < b.path + b.line ? -1 : 1));
  const expected = (pattern, suffix) =>
    Object.entries(ALL_TEXT)
      .filter(([rel]) => rel.endsWith(suffix))
      .flatMap(([rel, content]) =>
        content
          .split("\n")
          .map((text, i) => ({ path: `${ROOT}/${rel}`, line: i + 1, text }))
          .filter((m) => m.text.includes(pattern)),
      )
      .sort((a, b) => (a.path + a.line < b.path + b.line ? -1 : 1));

  const matches = parse(await grep("needle(", "*.py"));
  assert.equal(matches.length, 4);
  assert.deepEqual(matches, expected("needle(", ".py"));
  assert.deepEqual(parse(await grep("needle(")), expected("needle(", ""));
  assert.equal(await grep("no such text anywhere", "*.py"), "");
  assert.deepEqual(parse(await grep("-- dash", "*.md")), []);
});

test("delete: probe, remove, probe again", TEST_TIMEOUT, async () => {
  const q = sq(`${ROOT}/docs`);
  assert.deepEqual(await execute(`test -e ${q} || test -L ${q}`), { output: "", exitCode: 0 });
  assert.deepEqual(await execute(`rm -rf ${q}`), { output: "", exitCode: 0 });
  assert.deepEqual(await execute(`test -e ${q} || test -L ${q}`), { output: "", exitCode: 1 });
});
