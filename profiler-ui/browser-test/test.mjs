// Drives memtrace serve's viewer in headless Chromium: the timeline draws, clicking an
// allocation shows its context, the leak table lists the planted leak (`leaky_cache`), a search
// narrows the bands, the stack tree panel draws; then saves a screenshot and prints its path.
// Usage: node test.mjs URL   (CHROMIUM: the browser, default /usr/bin/chromium; OUT: where the
// screenshot goes, default a new temp dir)
import { chromium } from 'playwright-core';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const url = process.argv[2];
if (!url) { console.error('usage: node test.mjs URL'); process.exit(2); }
const outDir = process.env.OUT || mkdtempSync(join(tmpdir(), 'memtrace-browser-'));
let failed = 0;
let passed = 0;
function check(name, ok, detail) {
  if (ok) { passed += 1; console.log(`ok   ${name}`); } else { failed += 1; console.log(`FAIL ${name}: ${detail}`); }
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu'],
});
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1100 } });
  const errors = [];
  const outside = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  page.on('request', (r) => { if (!r.url().startsWith(url)) outside.push(r.url()); });
  await page.goto(url);
  await page.waitForSelector('body[data-ready="1"]', { timeout: 30000 });

  // 1. The timeline draws: a good share of its pixels are not background.
  const inked = await page.evaluate(() => {
    const c = document.getElementById('timeline');
    const data = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let ink = 0;
    for (let i = 3; i < data.length; i += 4) if (data[i] > 0) ink += 1;
    return ink / (c.width * c.height);
  });
  check('timeline draws', inked > 0.05, `only ${(100 * inked).toFixed(2)}% of its pixels are drawn`);
  const curvesInked = await page.evaluate(() => {
    const c = document.getElementById('curves');
    const data = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let ink = 0;
    for (let i = 3; i < data.length; i += 4) if (data[i] > 0) ink += 1;
    return ink;
  });
  check('curves draw', curvesInked > 500, `${curvesInked} pixels drawn`);

  // 2. The leak table lists the planted leak.
  const leaks = await page.textContent('#leaks');
  check('leak table lists leaky_cache', /leaky_cache/.test(leaks), leaks.slice(0, 300));

  // 3. Clicking an allocation shows its context (tags and frames).
  const rects = await page.evaluate(() => window.memtrace.bandRects());
  const target = rects.filter((r) => r.w >= 3 && r.h >= 3).sort((a, b) => b.w * b.h - a.w * a.h)[0];
  check('bands are drawn individually', Boolean(target), `${rects.length} band rectangles`);
  if (target) {
    const box = await page.locator('#timeline').boundingBox();
    await page.mouse.click(box.x + target.x + target.w / 2, box.y + target.y + target.h / 2);
    await page.waitForFunction(() => /allocation \d+/.test(document.getElementById('context-body').textContent), null, { timeout: 10000 });
    const pane = await page.textContent('#context-body');
    const tag = target.site.split('/').pop();
    check('clicking a band shows its context', pane.includes('tags:') && pane.includes(tag) && pane.includes('model.py'), pane.slice(0, 300));
  }

  // 4. A search narrows the bands.
  const before = await page.evaluate(() => Number(document.getElementById('timeline').dataset.matched));
  await page.fill('#search', 'leaky');
  await page.waitForFunction((n) => Number(document.getElementById('timeline').dataset.matched) < n, before, { timeout: 10000 });
  const after = await page.evaluate(() => Number(document.getElementById('timeline').dataset.matched));
  const sites = await page.evaluate(() => window.memtrace.bandRects().map((r) => r.site));
  check('search narrows the bands', after > 0 && after < before && sites.every((s) => s.includes('leaky_cache')),
    `${before} -> ${after} allocations, sites ${[...new Set(sites)].join(', ')}`);
  // ... and the tables: every site row left in the breakdown names the search.
  const rows = await page.evaluate(() => [...document.querySelectorAll('#breakdown tbody tr')]
    .filter((tr) => tr.children.length === 4 && tr.children[0].tagName === 'TD')
    .map((tr) => tr.children[0].textContent));
  check('search narrows the tables', rows.length > 0 && rows.every((s) => s.includes('leaky')),
    rows.join(', '));
  await page.fill('#search', '');
  await page.waitForFunction((n) => Number(document.getElementById('timeline').dataset.matched) === n, before, { timeout: 10000 });

  // 5. The stack tree panel draws the selected state: its root holds every allocated byte.
  await page.waitForFunction(() => Number(document.getElementById('tree').dataset.nodes) > 1, null, { timeout: 10000 });
  const tree = await page.evaluate(() => ({ data: window.memtraceTree.data(), text: document.getElementById('tree').textContent }));
  check('stack tree panel draws', tree.data.tree.bytes === tree.data.allocated_bytes && tree.text.includes('all allocated blocks') &&
    tree.data.tree.children.length > 0, tree.text.slice(0, 300));

  check('no script errors', errors.length === 0, errors.join('; '));
  check('no request leaves the server', outside.length === 0, outside.join(', '));
  const shot = join(outDir, 'memtrace-viewer.png');
  await page.screenshot({ path: shot, fullPage: true });
  console.log(`screenshot: ${shot}`);
} finally {
  await browser.close();
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
