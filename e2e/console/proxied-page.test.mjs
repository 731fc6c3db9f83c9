// Opens pages a sandbox serves through sandboxd's proxy route in Debian's
// chromium (playwright-core): run by e2e/console_proxy_test.go, which starts
// an --insecure sandboxd and a sandbox serving the pages. Each page's script
// writes into its title what it could do from there; here we check that it
// ran, in an opaque origin, and could neither call the API nor read the
// tab's storage.
//
// Env: PAGES (space-separated URLs), CHROMIUM (default /usr/bin/chromium).
import assert from 'node:assert/strict';
import { chromium } from 'playwright-core';

const pages = (process.env.PAGES || '').split(' ').filter(Boolean);
assert.ok(pages.length, 'PAGES is required');

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--headless=new', '--no-sandbox'],
});
try {
  for (const url of pages) {
    console.log(`--- ${url}`);
    const context = await browser.newContext();
    const page = await context.newPage();
    const res = await page.goto(url);
    assert.equal(res.status(), 200);
    await page.waitForFunction(() => document.title.startsWith('DONE '), null, { timeout: 90_000 });
    const r = JSON.parse((await page.title()).slice('DONE '.length));
    console.log(JSON.stringify(r));
    assert.equal(r.origin, 'null', 'the page must run in an opaque origin, not the console\'s');
    assert.match(r.create, /^refused /, 'the page must not create a sandbox');
    assert.match(r.list, /^refused /, 'the page must not read the API');
    assert.equal(r.listNoCors, 'opaque 0 ', 'a no-cors read must stay opaque');
    assert.match(r.storage, /^refused /, 'the page must not reach the origin\'s storage');
    await context.close();
  }
  console.log('OK');
} finally {
  await browser.close();
}
