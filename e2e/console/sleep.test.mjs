// Wakes sleeping sandboxes from sandboxd's web console in Debian's chromium
// (playwright-core): run by e2e/console_sleep_test.go, which makes one
// sandbox asleep by pause and one asleep by stop, each holding
// /tmp/kept.txt, and checks afterwards in the server's log that both woke.
//
// Env: SANDBOXD_URL, SANDBOXD_API_KEY, PAUSED_ID, STOPPED_ID,
// SANDBOXD_ARTIFACTS (screenshots), CHROMIUM (default /usr/bin/chromium).
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const { SANDBOXD_URL: base, SANDBOXD_API_KEY: key, PAUSED_ID: paused, STOPPED_ID: stopped, SANDBOXD_ARTIFACTS: shots } = process.env;
assert.ok(base && key && paused && stopped && shots, 'SANDBOXD_URL, SANDBOXD_API_KEY, PAUSED_ID, STOPPED_ID and SANDBOXD_ARTIFACTS are required');
mkdirSync(shots, { recursive: true });

// Generous: the machine is shared and slow; these only guard against hangs.
const WAIT = { timeout: 90_000 };

const step = (name) => console.log(`--- ${name}`);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--headless=new', '--no-sandbox'],
});
const page = await (await browser.newContext({ viewport: { width: 1280, height: 860 } })).newPage();
const problems = [];
page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
const shot = async (name) => page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
const api = (path) => page.evaluate(async ({ path, key }) => (await fetch(path, { headers: { 'OPEN-SANDBOX-API-KEY': key } })).json(), { path, key });

try {
  step('sign in');
  await page.goto(`${base}/console/`);
  await page.waitForSelector('#signin', WAIT);
  await page.fill('#apikey', key);
  await page.click('#signin-button');
  await page.waitForSelector('#sandboxes', WAIT);

  step('the list shows both asleep, and looking at it wakes neither');
  for (const [id, reason] of [[paused, 'IDLE_PAUSED'], [stopped, 'IDLE_STOPPED']]) {
    await page.waitForFunction(({ sel, want }) => new RegExp(`Paused\\s*${want}`).test(document.querySelector(sel)?.textContent || ''),
      { sel: `tr[data-id="${id}"]`, want: reason }, WAIT);
  }
  await shot('sleep-1-list');
  assert.equal((await api(`/v1/sandboxes/${paused}`)).status.reason, 'IDLE_PAUSED');
  assert.equal((await api(`/v1/sandboxes/${stopped}`)).status.reason, 'IDLE_STOPPED');

  step('opening the paused one wakes it: its resource charts are read through the proxy');
  await page.goto(`${base}/console/#/sandbox/${paused}/overview`);
  await page.waitForFunction(() => {
    const v = document.querySelectorAll('.chart .value');
    return v.length === 2 && [...v].every((e) => /\d/.test(e.textContent));
  }, null, WAIT);
  await shot('sleep-2-overview');

  step('a command there finds its file');
  await page.click('a[href$="/commands"]');
  await page.waitForSelector('#command', WAIT);
  await page.fill('#command', 'cat /tmp/kept.txt');
  await page.click('#run');
  await page.waitForFunction(() => /exit code 0/.test(document.querySelector('#exit').textContent), null, WAIT);
  assert.equal(await page.evaluate(() => [...document.querySelectorAll('#output .stdout')].map((e) => e.textContent).join('')), 'kept\n');

  step('opening the files of the stopped one wakes it, and its file is there');
  await page.goto(`${base}/console/#/sandbox/${stopped}/files`);
  await page.waitForSelector('tr[data-path="/tmp/kept.txt"]', WAIT);
  await page.click('tr[data-path="/tmp/kept.txt"] a');
  await page.waitForSelector('#preview-text', WAIT);
  assert.equal(await page.textContent('#preview-text'), 'kept\n');
  await shot('sleep-3-files');

  assert.deepEqual(problems, [], 'no script errors');
  console.log('OK');
} finally {
  await browser.close();
}
