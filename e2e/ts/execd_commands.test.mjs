// Commands through the official TypeScript SDK (POST /command): line events,
// exit codes, large and concurrent output, timeouts, big commands, cwd, envs,
// and the agent coming back after being killed. One code-interpreter
// sandbox serves every test; the last test kills its agent.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { SandboxApiException } from "@alibaba-group/opensandbox";
import {
  BUSYBOX,
  TEST_TIMEOUT,
  assertLines,
  createSandbox,
  destroy,
  mustRun,
  stderrOf,
  stdoutOf,
} from "./lib.mjs";

let sb;
before(async () => {
  sb = await createSandbox();
});
after(async () => {
  await destroy(sb);
});

test("one stdout event per line, terminators stripped, a blank line as \\n", TEST_TIMEOUT, async () => {
  // The second printf completes a line the first one started.
  const ex = await sb.commands.run(String.raw`printf 'one\ntwo\n\nthree\r\nfour\rfive\npar'; sleep 0.3; printf 'tial\nlast-no-newline'`);
  assert.deepEqual(stdoutOf(ex), ["one", "two", "\n", "three", "four", "five", "partial", "last-no-newline"]);
  assert.deepEqual(stderrOf(ex), []);
  assert.equal(ex.exitCode, 0);
  assert.equal(ex.error, undefined);
  assert.ok(ex.complete, "execution_complete was received");
  assert.match(ex.id ?? "", /\S/, "the init event carries the command id");
});

test("exit codes: 0 is success, anything else an error event", TEST_TIMEOUT, async () => {
  for (const [command, code] of [["true", 0], ["exit 0", 0], ["false", 1], ["exit 7", 7], ["exit 255", 255], ["sh -c 'kill -9 $$'; exit $?", 137]]) {
    const ex = await sb.commands.run(command);
    assert.equal(ex.exitCode, code, `${command}: exit code`);
    if (code === 0) {
      assert.equal(ex.error, undefined, `${command}: no error`);
      assert.ok(ex.complete, `${command}: execution_complete`);
    } else {
      assert.equal(ex.error?.name, "CommandExecError", `${command}: error name`);
      assert.equal(ex.error?.value, String(code), `${command}: error evalue`);
      assert.equal(ex.complete, undefined, `${command}: no execution_complete after a failure`);
    }
  }
});

test("stderr lines are stderr events", TEST_TIMEOUT, async () => {
  const ex = await sb.commands.run("echo out1; echo err1 >&2; echo out2; printf 'err2\\n\\nerr3' >&2; exit 3");
  assert.deepEqual(stdoutOf(ex), ["out1", "out2"]);
  assert.deepEqual(stderrOf(ex), ["err1", "err2", "\n", "err3"]);
  assert.equal(ex.exitCode, 3);
});

test("5 concurrent commands each print 500 KiB, every line intact", TEST_TIMEOUT, async () => {
  // 5120 lines of exactly 100 bytes per command, each command its own text.
  const lines = 5120;
  const expected = (k) =>
    Array.from({ length: lines }, (_, i) => `${k}:${String(i).padStart(5, "0")}:`.padEnd(99, String.fromCharCode(97 + k)));
  const script = (k) =>
    `python3 -c 'import sys\nfor i in range(${lines}): sys.stdout.write(("%d:%05d:" % (${k}, i)).ljust(99, "${String.fromCharCode(97 + k)}") + "\\n")'`;
  const runs = await Promise.all([0, 1, 2, 3, 4].map((k) => sb.commands.run(script(k))));
  runs.forEach((ex, k) => {
    assert.equal(ex.exitCode, 0, `command ${k}: ${JSON.stringify(ex.error)}`);
    assertLines(stdoutOf(ex), expected(k), `command ${k}`);
  });
});

test("a 4 MiB line arrives as one event", TEST_TIMEOUT, async () => {
  const size = 4 << 20;
  const ex = await sb.commands.run(`head -c ${size} /dev/zero | tr '\\0' y; echo; echo after`);
  assert.equal(ex.exitCode, 0);
  const out = stdoutOf(ex);
  assert.equal(out.length, 2, `want 2 events, got ${out.length} of lengths ${out.map((s) => s.length).slice(0, 10)}`);
  assert.equal(out[0].length, size);
  assert.ok(/^y+$/.test(out[0]), "the line is all y");
  assert.equal(out[1], "after");
});

test("NUL, U+2028, U+2029 and U+0085 round trip", TEST_TIMEOUT, async () => {
  const ex = await sb.commands.run(
    String.raw`printf 'a\000b\000\n'; python3 -c 'import sys; sys.stdout.buffer.write("x\u2028y\u0085z\u2029w\n".encode()); sys.stderr.buffer.write("e\u2028\u0085\n".encode())'`,
  );
  assert.equal(ex.exitCode, 0);
  assert.deepEqual(stdoutOf(ex), ["a\u0000b\u0000", "x\u2028y\u0085z\u2029w"]);
  assert.deepEqual(stderrOf(ex), ["e\u2028\u0085"]);
});

test("a timeout kills the command's whole process tree", TEST_TIMEOUT, async () => {
  // sh is the command's child and sleep its grandchild.
  const ex = await sb.commands.run(
    "rm -f /tmp/grandchild.pid; sh -c 'sleep 600 & echo $! > /tmp/grandchild.pid; echo started; wait'; echo not-reached",
    { timeoutSeconds: 3 },
  );
  assert.deepEqual(stdoutOf(ex), ["started"]);
  assert.equal(ex.exitCode, -1, "a command killed by its timeout reports -1");
  assert.equal(ex.error?.value, "-1");
  // Gone, or a zombie if nothing reaps orphans: either way it no longer runs.
  const state = await mustRun(
    sb,
    `pid=$(cat /tmp/grandchild.pid); test -n "$pid" || exit 9; if [ -e /proc/$pid ]; then sed -n 's/^State:[[:space:]]*\\([A-Z]\\).*/\\1/p' /proc/$pid/status; else echo gone; fi`,
  );
  assert.equal(state.length, 1);
  assert.ok(["gone", "Z"].includes(state[0]), `the grandchild is in state ${state[0]}`);
});

test("heredocs", TEST_TIMEOUT, async () => {
  const out = await mustRun(
    sb,
    [
      "cat <<'EOF'",
      "literal $HOME `date` \\n",
      "  indented\ttab",
      "EOF",
      "python3 - <<'PY'",
      "import os",
      "print('stdin of the command is', os.path.realpath('/proc/%d/fd/0' % os.getppid()))",
      "PY",
      "tr a-z A-Z <<EOF",
      "expanded ${HOME}",
      "EOF",
    ].join("\n"),
  );
  assert.deepEqual(out, ["literal $HOME `date` \\n", "  indented\ttab", "stdin of the command is /dev/null", "EXPANDED /ROOT"]);
});

test("a 1 MiB command (heredoc and one 1 MiB word)", TEST_TIMEOUT, async () => {
  const payload = randomBytes(786432).toString("base64"); // 1 MiB of text
  assert.equal(payload.length, 1 << 20);
  const folded = payload.match(/.{1,76}/g).join("\n") + "\n";
  const sha = (s) => createHash("sha256").update(s).digest("hex");

  const heredoc = await mustRun(sb, `sha256sum <<'EOF'\n${folded}EOF`);
  assert.deepEqual(heredoc, [`${sha(folded)}  -`]);

  const word = await mustRun(sb, `x='${payload}'; echo "\${#x}"; printf %s "$x" | sha256sum`);
  assert.deepEqual(word, [String(1 << 20), `${sha(payload)}  -`]);
});

test("working directory, and a 400 for a missing one", TEST_TIMEOUT, async () => {
  assert.deepEqual(await mustRun(sb, "pwd", { workingDirectory: "/usr/share" }), ["/usr/share"]);
  // The image's WORKDIR is the default.
  assert.deepEqual(await mustRun(sb, "pwd"), ["/workspace"]);
  await assert.rejects(sb.commands.run("pwd", { workingDirectory: "/no/such/dir" }), (err) => {
    assert.ok(err instanceof SandboxApiException, `unexpected error ${err}`);
    assert.equal(err.statusCode, 400);
    assert.equal(err.error.code, "INVALID_REQUEST_BODY");
    return true;
  });
});

test("envs are added to the sandbox's environment", TEST_TIMEOUT, async () => {
  const out = await mustRun(
    sb,
    `echo "$GREETING"; echo "[$EMPTY]" "\${EMPTY+set}"; echo "$LANG"; echo "$PATH"; printenv MULTI`,
    { envs: { GREETING: "hello world", EMPTY: "", LANG: "C", MULTI: "a b\tc" } },
  );
  assert.deepEqual(out, ["hello world", "[] set", "C", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "a b\tc"]);
  // They do not leak into the next command.
  assert.deepEqual(await mustRun(sb, `echo "[\${GREETING-unset}]"`), ["[unset]"]);
});

test("the stream ends although a background child keeps stdout open", TEST_TIMEOUT, async () => {
  const ex = await sb.commands.run("sleep 600 & echo $! > /tmp/holder.pid; echo started");
  assert.equal(ex.exitCode, 0);
  assert.deepEqual(stdoutOf(ex), ["started"]);
  await mustRun(sb, "kill $(cat /tmp/holder.pid)");
});

test("sh is used where there is no bash (busybox)", TEST_TIMEOUT, async () => {
  const bb = await createSandbox({ image: BUSYBOX, entrypoint: ["tail", "-f", "/dev/null"], resource: { cpu: "1", memory: "256Mi" } });
  try {
    const ex = await bb.commands.run("test -e /bin/bash && echo bash; cat <<EOF\nsh $((6*7))\nEOF\nexit 2");
    assert.deepEqual(stdoutOf(ex), ["sh 42"]);
    assert.equal(ex.exitCode, 2);
  } finally {
    await destroy(bb);
  }
});

// agentProcesses lists the agent's processes in the sandbox, by the command
// lines of the bridge (`sandboxd agent`, one per exec stream of sandboxd;
// none where sandboxd reaches the daemon directly) and of the daemon
// (`sandboxd agent --daemon`) that serves them.
const AGENT_PROCESSES = String.raw`for p in /proc/[0-9]*; do
  case "$(tr '\0' ' ' < $p/cmdline 2>/dev/null)" in
  */sandboxd\ agent\ ) echo "bridge $p" ;;
  */sandboxd\ agent\ --daemon\ ) echo "daemon $p" ;;
  esac
done`;

async function agentProcesses() {
  const procs = { bridge: [], daemon: [] };
  for (const line of await mustRun(sb, AGENT_PROCESSES)) {
    const [kind, path] = line.split(" ");
    procs[kind].push(path.replace("/proc/", ""));
  }
  assert.equal(procs.daemon.length, 1, `one agent daemon: ${JSON.stringify(procs)}`);
  // A command's parent is the daemon.
  assert.deepEqual(await mustRun(sb, "echo $PPID"), procs.daemon);
  return procs;
}

test("the agent comes back after being killed from inside", TEST_TIMEOUT, async () => {
  const first = await agentProcesses();
  const bg = await sb.commands.run("sleep 600", { background: true });

  // Without its bridge the connection ends (and with it the command that
  // kills it, so either outcome of that run is fine); the daemon lives on.
  // On the direct path (e2e/direct_test.go) there is no bridge to kill.
  let second = first;
  if (first.bridge.length > 0) {
    await sb.commands.run(`kill -9 ${first.bridge.join(" ")}; sleep 5`).catch(() => {});
    second = await agentProcesses();
    assert.deepEqual(second.daemon, first.daemon, "the daemon survived");
    assert.ok(!second.bridge.some((p) => first.bridge.includes(p)), "a new bridge serves the sandbox");
  }
  assert.equal((await sb.commands.getCommandStatus(bg.id)).running, true, "the daemon kept its background command");

  // Like pkill -9 -f "sandboxd agent": daemon and bridge. The daemon goes
  // first: once the bridge is gone, the daemon kills this very command,
  // which could then die before it had signalled the daemon.
  await sb.commands.run(`kill -9 ${second.daemon.concat(second.bridge).join(" ")}; sleep 5`).catch(() => {});
  const third = await agentProcesses();
  assert.notDeepEqual(third.daemon, second.daemon, "a new daemon serves the sandbox");
  assert.deepEqual(await mustRun(sb, "echo still works"), ["still works"]);
});
