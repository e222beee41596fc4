// Drives memtrace serve's page of several files in headless Chromium: writes three rank traces
// of one job with known peaks, serves them as `rank-{rank}.jsonl`, checks every peak, the
// imbalance and the timelines' shared scale against what the traces imply, opens rank 2 in the
// full viewer from its label and checks the viewer shows rank 2, then serves two of them and
// checks the sites that changed; saves screenshots and prints their paths.
// Usage: node compare.mjs PATH/TO/memtrace   (CHROMIUM: the browser, default /usr/bin/chromium;
// OUT: where the screenshot goes, default a new temp dir)
import { chromium } from 'playwright-core';
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const memtrace = process.argv[2];
if (!memtrace) { console.error('usage: node compare.mjs PATH/TO/memtrace'); process.exit(2); }
const outDir = process.env.OUT || mkdtempSync(join(tmpdir(), 'memtrace-browser-'));
const work = mkdtempSync(join(tmpdir(), 'memtrace-compare-'));
let failed = 0;
let passed = 0;
function check(name, ok, detail) {
  if (ok) { passed += 1; console.log(`ok   ${name}`); } else { failed += 1; console.log(`FAIL ${name}: ${detail}`); }
}

const MiB = 1024 * 1024;
const WEIGHTS = 256 * MiB;
const SCRATCH = 32 * MiB;
const LAYERS = 8;
const STEPS = 3;
// Activation bytes per layer of each rank: rank 2 holds half as much again.
const ACTIVATIONS = [64 * MiB, 64 * MiB, 96 * MiB];

// One rank: weights (100 bytes fewer asked for) and a scratch block freed at once (its segment
// stays cached), then STEPS steps of LAYERS activations allocated and freed; each step reuses
// the segments of the one before. Events are 10 µs apart.
// Allocated bytes peak at state 6 + 2 * LAYERS, after event 5 + 2 * LAYERS (the last
// activation of step 0; events are numbered from 0), at
// WEIGHTS + LAYERS * a; reserved bytes one event earlier (its segment) at that plus SCRATCH.
function rankTrace(path, a) {
  const lines = [{ blockpool_trace: 1, created_by: 'memtrace compare test', time_origin_unix_us: 1700000000000000, allocator_config: '' }];
  lines.push({ frame: 1, name: 'Model.forward', file: 'model.py', line: 10 });
  lines.push({ frame: 2, name: 'Model.__init__', file: 'model.py', line: 3 });
  const contexts = new Map();
  const context = (tags, frames) => {
    const key = JSON.stringify(tags);
    if (!contexts.has(key)) {
      contexts.set(key, contexts.size + 1);
      lines.push({ context: contexts.size, tags, frames });
    }
    return contexts.get(key);
  };
  let time = 1000;
  let next = 0x7f0000000000;
  let events = 0;
  const event = (name, addr, size, requested, ctx) => {
    lines.push({ event: name, device: 0, stream: 0, addr, size, requested, time_us: time, context: ctx });
    time += 10;
    events += 1;
  };
  const segment = (size, requested, ctx) => {
    const addr = next;
    next += size;
    event('segment_alloc', addr, size, 0, ctx);
    event('alloc', addr, size, requested, ctx);
    return addr;
  };
  const free = (addr, size) => { event('free_requested', addr, size, size, 0); event('free_completed', addr, size, size, 0); };
  segment(WEIGHTS, WEIGHTS - 100, context(['init', 'weights'], [2]));
  free(segment(SCRATCH, SCRATCH, context(['init', 'scratch'], [2])), SCRATCH);
  let layers = [];
  for (let step = 0; step < STEPS; step += 1) {
    const ctx = context([`step${step}`, 'activations'], [1]);
    const held = [];
    for (let layer = 0; layer < LAYERS; layer += 1) {
      if (step === 0) {
        held.push(segment(a, a, ctx));
      } else {
        event('alloc', layers[layer], a, a, ctx);
        held.push(layers[layer]);
      }
    }
    for (const addr of [...held].reverse()) free(addr, a);
    layers = held;
  }
  lines.push({ end: { events, segments: 0, dropped_events: 0 } });
  writeFileSync(path, lines.map((l) => JSON.stringify(l)).join('\n') + '\n');
  return events;
}

const events = ACTIVATIONS.map((a, rank) => rankTrace(join(work, `rank-${rank}.jsonl`), a));
const peakIndex = 6 + 2 * LAYERS;
const expected = ACTIVATIONS.map((a) => ({
  allocated: WEIGHTS + LAYERS * a,
  reserved: WEIGHTS + SCRATCH + LAYERS * a,
  requested: WEIGHTS - 100 + LAYERS * a,
}));
// Bytes in PyTorch's units, as the page must write them.
function bytes(n) {
  if (n <= 1024) return `${n} bytes`;
  if (n <= MiB) return `${(n / 1024).toFixed(2)} KiB`;
  if (n <= 1024 * MiB) return `${(n / MiB).toFixed(2)} MiB`;
  return `${(n / 1024 / MiB).toFixed(2)} GiB`;
}
function spread(values) {
  const max = Math.max(...values);
  const min = Math.min(...values);
  const mean = values.reduce((s, v) => s + v, 0) / values.length;
  let outlier = 0;
  values.forEach((v, i) => { if (Math.abs(v - mean) > Math.abs(values[outlier] - mean)) outlier = i; });
  return { max, min, mean, ratio: max / min, excess: max - mean, outlier };
}

// Starts `memtrace serve ARGS --port 0`; resolves with its URL once it prints one.
function serve(args) {
  return new Promise((resolve, reject) => {
    const child = spawn(memtrace, ['serve', ...args, '--port', '0'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    const timer = setTimeout(() => reject(new Error(`no address in 30 s: ${output}`)), 30000);
    const read = (chunk) => {
      output += chunk;
      const m = /http:\/\/127\.0\.0\.1:\d+\//.exec(output);
      if (m) { clearTimeout(timer); resolve({ child, url: m[0], output }); }
    };
    child.stdout.on('data', read);
    child.stderr.on('data', read);
    child.on('exit', (code) => { clearTimeout(timer); reject(new Error(`memtrace serve exited ${code}: ${output}`)); });
  });
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu'],
});
const servers = [];
try {
  // 1. Three ranks from a pattern.
  const ranks = await serve([join(work, 'rank-{rank}.jsonl')]);
  servers.push(ranks.child);
  check('the banner lists each rank', [0, 1, 2].every((r) => ranks.output.includes(`rank ${r}: `)), ranks.output);
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  const errors = [];
  const outside = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  page.on('request', (r) => { if (!r.url().startsWith(ranks.url)) outside.push(r.url()); });
  await page.goto(ranks.url);
  await page.waitForSelector('body[data-ready="1"]', { timeout: 30000 });

  check('the title counts the ranks', (await page.textContent('#title')) === '3 ranks side by side', await page.textContent('#title'));
  const rows = await page.evaluate(() => [...document.querySelectorAll('#files tr[data-file]')].map((tr) => ({
    label: tr.children[0].textContent,
    peaks: [...tr.querySelectorAll('td[data-bytes]')].map((td) => ({ bytes: Number(td.dataset.bytes), index: Number(td.dataset.index), text: td.textContent })),
    outlier: tr.classList.contains('outlier'),
  })));
  check('one row per rank, in rank order', rows.map((r) => r.label).join() === 'rank 0,rank 1,rank 2', rows.map((r) => r.label).join());
  rows.forEach((r, rank) => {
    const e = expected[rank];
    const [allocated, reserved, requested] = r.peaks;
    check(`rank ${rank}: peaks exact`,
      allocated.bytes === e.allocated && reserved.bytes === e.reserved && requested.bytes === e.requested,
      JSON.stringify(r.peaks));
    check(`rank ${rank}: each peak at its event`,
      allocated.index === peakIndex && reserved.index === peakIndex - 1 && requested.index === peakIndex,
      r.peaks.map((p) => p.index).join());
    const a = `after event ${peakIndex - 1} (alloc ${(ACTIVATIONS[rank] / MiB).toFixed(2)} MiB, step0/activations), ${10 * (peakIndex - 1)} µs in`;
    check(`rank ${rank}: the allocated peak says what reached it`, allocated.text.endsWith(a), `${allocated.text} vs ${a}`);
    check(`rank ${rank}: outlier marked only on rank 2`, r.outlier === (rank === 2), String(r.outlier));
  });

  const imbalance = await page.evaluate(() => Object.fromEntries([...document.querySelectorAll('#imbalance tr[data-peak]')].map((tr) => [
    tr.dataset.peak, [...tr.querySelectorAll('td[data-value]')].map((td) => ({ value: td.dataset.value, text: td.textContent })),
  ])));
  for (const name of ['allocated', 'reserved']) {
    const s = spread(expected.map((e) => e[name]));
    const cells = imbalance[name] || [];
    const values = cells.map((c) => Number(c.value));
    check(`imbalance of ${name} peaks exact`,
      values.length === 6 && values[0] === s.max && values[1] === s.min && values[2] === s.mean &&
      values[3] === s.ratio && values[4] === s.excess && values[5] === s.outlier,
      `${values.join()} vs ${[s.max, s.min, s.mean, s.ratio, s.excess, s.outlier].join()}`);
    const texts = cells.map((c) => c.text);
    check(`imbalance of ${name} reads`, texts[0] === `${bytes(s.max)} (rank 2)` && texts[1] === `${bytes(s.min)} (rank 0)` &&
      texts[3] === `${s.ratio.toFixed(3)}×` && texts[4] === bytes(Math.round(s.excess)) && texts[5] === 'rank 2',
    texts.join(' | '));
  }
  check('the imbalance is titled for ranks', (await page.textContent('#imbalance-title')) === 'Imbalance across ranks', await page.textContent('#imbalance-title'));

  // The timelines: drawn, on one scale (same x share for equally long ranks, heights in
  // proportion to the peaks), each curve's highest point the rank's peak.
  const plots = await page.evaluate(() => window.compare.plots);
  const inked = await page.evaluate(() => [...document.querySelectorAll('.card canvas')].map((c) => {
    const data = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let ink = 0;
    for (let i = 3; i < data.length; i += 4) if (data[i] > 0) ink += 1;
    return ink / (c.width * c.height);
  }));
  check('a timeline per rank draws', inked.length === 3 && inked.every((f) => f > 0.05), inked.map((f) => f.toFixed(3)).join());
  check('curves peak at each rank\'s peaks', plots.every((p, r) => p.allocated === expected[r].allocated && p.reserved === expected[r].reserved),
    JSON.stringify(plots));
  check('equal spans take equal widths', plots.every((p) => p.columns === plots[0].columns && p.columns === p.plotWidth), JSON.stringify(plots));
  const scale = expected[2].reserved;
  const bottom = 8 + (130 - 8 - 18);
  const heights = plots.map((p) => bottom - p.allocatedTopPx);
  check('heights on one scale', heights.every((h, r) => Math.abs(h - (130 - 26) * expected[r].allocated / scale) < 1e-6), heights.join());
  const sites = await page.evaluate(() => [...document.querySelectorAll('.card[data-file="2"] tr')].slice(1)
    .map((tr) => [tr.children[0].textContent, tr.children[1].dataset.value]));
  check('rank 2\'s sites at its peak', JSON.stringify(sites) === JSON.stringify([['step0/activations', String(LAYERS * ACTIVATIONS[2])], ['init/weights', String(WEIGHTS)]]),
    JSON.stringify(sites));
  check('no sites table for three files', await page.evaluate(() => document.getElementById('sites-box').hidden), 'shown');
  check('no script errors', errors.length === 0, errors.join('; '));
  check('no request leaves the server', outside.length === 0, outside.join(', '));
  const shot = join(outDir, 'memtrace-compare.png');
  await page.screenshot({ path: shot, fullPage: true });
  console.log(`screenshot: ${shot}`);

  // The full viewer of one file: rank 2's label opens it; every API call names file 2 and the
  // timeline draws rank 2's data (its activations are 96 MiB where rank 0's are 64 MiB).
  const links = await page.evaluate(() => [...document.querySelectorAll('#files tr[data-file] a.viewer')].map((a) => a.getAttribute('href')));
  check('each file links to its viewer', links.join() === '/index.html?file=0,/index.html?file=1,/index.html?file=2', links.join());
  const apiCalls = [];
  page.on('request', (r) => { const u = new URL(r.url()); if (u.pathname.startsWith('/api/')) apiCalls.push(u.pathname + u.search); });
  await Promise.all([page.waitForURL(/index\.html\?file=2$/), page.click('#files tr[data-file="2"] a.viewer')]);
  await page.waitForSelector('body[data-ready="1"]', { timeout: 30000 });
  await page.waitForFunction(() => Number(document.getElementById('tree').dataset.nodes) > 1, null, { timeout: 10000 }).catch(() => {});
  const viewer = await page.evaluate(() => {
    const t = window.memtrace.view.timeline;
    return {
      file: document.getElementById('file').textContent,
      back: document.getElementById('back').hidden ? null : document.getElementById('back').getAttribute('href'),
      peak: Math.max(...t.total),
      activations: [...new Set(t.bands.filter((b) => b.site === 'step0/activations').map((b) => b.size))],
      curves: Math.max(...window.memtrace.view.curves.allocated),
    };
  });
  check('the viewer says which file it shows and links back', viewer.file.startsWith('rank 2, one of 3 files served: ') &&
    viewer.file.includes('rank-2.jsonl') && viewer.back === '/', JSON.stringify(viewer));
  const apiFile2 = apiCalls.filter((u) => u !== '/api/compare');
  check('every API call of the viewer names file 2', apiFile2.length >= 8 && apiFile2.every((u) => /[?&]file=2(&|$)/.test(u)),
    apiFile2.filter((u) => !/[?&]file=2(&|$)/.test(u)).join(', ') || `${apiFile2.length} calls`);
  check('the viewer draws rank 2\'s data', viewer.peak === expected[2].allocated && viewer.curves === expected[2].allocated &&
    viewer.activations.join() === String(ACTIVATIONS[2]), JSON.stringify(viewer));
  const viewerShot = join(outDir, 'memtrace-compare-rank2.png');
  await page.screenshot({ path: viewerShot });
  console.log(`screenshot: ${viewerShot}`);
  await Promise.all([page.waitForURL(ranks.url), page.click('#back')]);
  await page.waitForSelector('body[data-ready="1"]', { timeout: 30000 });
  check('the link leads back to the comparison', (await page.textContent('#title')) === '3 ranks side by side', await page.textContent('#title'));

  // 2. Two ranks: the sites that changed, rank 2 against rank 0.
  const two = await serve([join(work, 'rank-0.jsonl'), join(work, 'rank-2.jsonl')]);
  servers.push(two.child);
  const second = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  second.on('pageerror', (e) => errors.push(String(e)));
  await second.goto(two.url);
  await second.waitForSelector('body[data-ready="1"]', { timeout: 30000 });
  const changed = await second.evaluate(() => [...document.querySelectorAll('#sites tr[data-site]')]
    .map((tr) => [tr.dataset.site, ...[...tr.querySelectorAll('td[data-value]')].map((td) => Number(td.dataset.value))]));
  const a0 = LAYERS * ACTIVATIONS[0];
  const a2 = LAYERS * ACTIVATIONS[2];
  check('two files: only the activations changed, by the difference at the peak',
    JSON.stringify(changed) === JSON.stringify([['step0/activations', a0, a2, a2 - a0, 0, 0, 0]]), JSON.stringify(changed));
  check('two files: the title names both', (await second.textContent('#sites-title')) === 'Sites: rank 2 against rank 0', await second.textContent('#sites-title'));
  check('two files: the note counts the sites', /^1 sites changed, 1 the same\./.test(await second.textContent('#sites-note')), await second.textContent('#sites-note'));
  check('no script errors on the two-file page', errors.length === 0, errors.join('; '));

  // Long paths (a run folder several names deep) and a long site wrap within their columns,
  // and the page fits its window: no path one character per line, nothing wider than the page.
  const deep = join(work, 'experiments_with_a_rather_long_folder_name_'.repeat(3), 'run_2026_12_06_seed_1234_lr_3e-4_batch_512_sequence_4096');
  mkdirSync(deep, { recursive: true });
  const long = [0, 1, 2].map((rank) => {
    // A site name with no place to break, as a module path without separators can be.
    const path = join(deep, `checkpointed_transformer_memory_snapshot_rank-${rank}.jsonl`);
    const text = readFileSync(join(work, `rank-${rank}.jsonl`), 'utf8')
      .replaceAll('"activations"', `"${'activations_of_the_transformer_blocks_'.repeat(4)}"`);
    writeFileSync(path, text);
    return path;
  });
  const longServer = await serve(long);
  servers.push(longServer.child);
  const third = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  third.on('pageerror', (e) => errors.push(String(e)));
  await third.goto(longServer.url);
  await third.waitForSelector('body[data-ready="1"]', { timeout: 30000 });
  const layout = await third.evaluate(() => ({
    pathWidths: [...document.querySelectorAll('#files td.path')].map((td) => Math.round(td.getBoundingClientRect().width)),
    pageWidth: document.documentElement.scrollWidth,
    window: window.innerWidth,
  }));
  check('long paths wrap within a readable column and the page fits its window',
    layout.pathWidths.length === 3 && layout.pathWidths.every((w) => w >= 180) && layout.pageWidth <= layout.window,
    JSON.stringify(layout));
  await third.screenshot({ path: join(outDir, 'memtrace-compare-long-paths.png'), fullPage: true });
  console.log(`screenshot: ${join(outDir, 'memtrace-compare-long-paths.png')}`);
  check('no script errors on the page of long paths', errors.length === 0, errors.join('; '));
  console.log(`traces: ${events.join(', ')} events`);
} finally {
  await browser.close();
  for (const child of servers) child.kill();
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
