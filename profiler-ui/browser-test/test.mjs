// Drives memtrace serve's viewer in headless Chromium: the timeline draws, clicking an
// allocation shows its context, the leak table lists the planted leak (`leaky_cache`), a search
// narrows the bands, the stack tree panel draws; the detail control draws fewer bands, hovering the grey summarized band
// says what it holds, the out-of-memory marker shows the failing request and its stack, the
// segment timeline draws the workspace segments, the state history lists and filters events and
// shows an event's stack; zooming in draws more of the window, at once from the answers in the
// page and again from the server's, and a window seen before with no request; eight API requests at once all
// answer; then saves a screenshot and prints its path. Last, it writes a trace without
// timestamps, serves it itself and checks the page offers no time axis; and a trace with a new
// stream per call, whose memory-by-stream panel it checks.
// Usage: node test.mjs URL PATH/TO/memtrace   (CHROMIUM: the browser, default
// /usr/bin/chromium; OUT: where the screenshot goes, default a new temp dir)
import { chromium } from 'playwright-core';
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const url = process.argv[2];
const memtrace = process.argv[3];
if (!url || !memtrace) { console.error('usage: node test.mjs URL PATH/TO/memtrace'); process.exit(2); }
const outDir = process.env.OUT || mkdtempSync(join(tmpdir(), 'memtrace-browser-'));
let failed = 0;
let passed = 0;
function check(name, ok, detail) {
  if (ok) { passed += 1; console.log(`ok   ${name}`); } else { failed += 1; console.log(`FAIL ${name}: ${detail}`); }
}

// A trace without timestamps (every event at time 0): weights, then a few steps of
// activations allocated and freed.
function untimedTrace(path) {
  const MiB = 1024 * 1024;
  const lines = [{ blockpool_trace: 1, created_by: 'memtrace browser test (no times)', allocator_config: '' },
    { frame: 1, name: 'Model.forward', file: 'model.py', line: 10 },
    { context: 1, tags: ['untimed'], frames: [1] }];
  let addr = 0x7f0000000000;
  let events = 0;
  const event = (name, a, size) => { lines.push({ event: name, device: 0, stream: 0, addr: a, size, requested: size, time_us: 0, context: 1 }); events += 1; };
  event('segment_alloc', addr, 1024 * MiB);
  for (let step = 0; step < 4; step += 1) {
    const held = [];
    for (let k = 0; k < 8; k += 1) { event('alloc', addr + k * 64 * MiB, 64 * MiB); held.push(addr + k * 64 * MiB); }
    for (const a of held.reverse()) { event('free_requested', a, 64 * MiB); event('free_completed', a, 64 * MiB); }
  }
  lines.push({ end: { events, segments: 0, dropped_events: 0 } });
  writeFileSync(path, lines.map((l) => JSON.stringify(l)).join('\n') + '\n');
  return events;
}

// A new stream for each of 5 calls, each with its own 40 MiB segment, allocating 40 MiB and
// freeing it; the third call's block is used by the fourth call's stream, so its free
// completes only after the fourth call has allocated (3 events later).
function streamPerCallTrace(path) {
  const MiB = 1024 * 1024;
  const size = 40 * MiB;
  const lines = [{ blockpool_trace: 1, created_by: 'memtrace browser test (streams)', allocator_config: '' }];
  let addr = 0x7f0000000000;
  let time = 0;
  const event = (name, stream, a) => { time += 1; lines.push({ event: name, device: 0, stream, addr: a, size, requested: size, time_us: time }); };
  let deferred = null;
  for (let stream = 1; stream <= 5; stream += 1) {
    event('segment_alloc', stream, addr);
    event('alloc', stream, addr);
    if (deferred !== null) { event('free_completed', 3, deferred); deferred = null; }
    event('free_requested', stream, addr);
    if (stream === 3) deferred = addr; else event('free_completed', stream, addr);
    addr += size;
  }
  writeFileSync(path, lines.map((l) => JSON.stringify(l)).join('\n') + '\n');
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

const servers = [];
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

  // 2. The leak table lists the planted leak as growing, with its growth per step, and the
  // weights as persistent, not among the leaks; it says what a step is.
  const leaks = await page.textContent('#leaks');
  check('leak table lists leaky_cache', /leaky_cache/.test(leaks), leaks.slice(0, 300));
  const leakGroups = () => page.evaluate(() => {
    const groups = {};
    let name = '';
    for (const tr of document.querySelectorAll('#leaks tbody tr')) {
      if (tr.classList.contains('group')) { name = tr.textContent.split(':')[0]; groups[name] = []; } else if (name && tr.children[0].tagName === 'TD') groups[name].push(tr.textContent);
    }
    return groups;
  });
  let groups = await leakGroups();
  check('leak table: leaky_cache grows by 64 MiB a step',
    groups.growing && groups.growing.length === 1 && /leaky_cache\+64\.0 MiB, \+1 blocks/.test(groups.growing[0]), JSON.stringify(groups));
  check('leak table: the weights are persistent, not growing or alive',
    groups.persistent && groups.persistent.length === 1 && /^weights \(since init\)512\.0 MiB4$/.test(groups.persistent[0]) &&
    !groups['alive at the end of the trace, allocated during it (persistent sites apart)'].some((r) => r.includes('weights')), JSON.stringify(groups));
  check('leak table says the outermost ranges are the steps',
    /no `ProfilerStep#\*` annotation .*the outermost annotation ranges instead, 5 of them \(init \.\. step3\)/.test(leaks), leaks.slice(0, 300));
  // Naming the step annotation: `step` (step0 .. step3) makes `init` no step, so the weights
  // are there before the first step.
  await page.fill('#leak-step', 'step');
  await page.waitForFunction(() => /the `step\*` annotation ranges, 4 of them/.test(document.getElementById('leaks').textContent), null, { timeout: 10000 });
  groups = await leakGroups();
  check('a named step annotation measures from before its first range',
    groups.persistent.length === 1 && /^init\/weights \(since before step0\)/.test(groups.persistent[0]) && /leaky_cache/.test(groups.growing[0]), JSON.stringify(groups));
  await page.fill('#leak-step', '');
  await page.waitForFunction(() => /5 of them/.test(document.getElementById('leaks').textContent), null, { timeout: 10000 });
  // Filling the box scrolled the page to it; the clicks below aim at the timeline's place.
  await page.evaluate(() => window.scrollTo(0, 0));

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
  // Its caption names the state by the file's event numbers, as --at does (not the state index).
  const treeCaption = await page.evaluate(() => document.getElementById('tree-caption').textContent);
  check('stack tree caption names the state by event number', treeCaption.startsWith(tree.data.label) &&
    /^(after event \d+|before event 0)/.test(treeCaption) &&
    (tree.data.after_event === null ? tree.data.index === 0 : tree.data.after_event === tree.data.index - 1), treeCaption);
  const timelineBox = await page.locator('#timeline').boundingBox();
  const tipText = async (pattern) => {
    try {
      await page.waitForFunction((p) => { const t = document.getElementById('tooltip'); return !t.hidden && new RegExp(p).test(t.textContent); }, pattern, { timeout: 10000 });
    } catch (e) { /* the check below reports what the tooltip said */ }
    return page.evaluate(() => { const t = document.getElementById('tooltip'); return t.hidden ? '(hidden)' : t.textContent; });
  };

  // 4b. Hovering the band clicked in 3 says its life in the words of its context pane: the
  // file's event numbers, never a state index or a number past the last event.
  if (target) {
    const pane = await page.textContent('#context-body');
    const again = (await page.evaluate(() => window.memtrace.bandRects())).find((r) => r.id === target.id);
    if (again) {
      await page.mouse.move(timelineBox.x + again.x + again.w / 2, timelineBox.y + again.y + again.h / 2);
      const tip = await tipText('from ');
      const from = /from(before the trace began|event \d+|annotation after event \d+) \(/.exec(pane);
      const until = /until(event \d+|annotation after event \d+) \(|untilalive at the end/.exec(pane);
      const events = await page.evaluate(() => window.memtrace.meta().devices[0].events);
      const numbers = [...tip.matchAll(/event (\d+)/g)].map((m) => Number(m[1]));
      check('a band\'s hover and its context pane name the same events',
        Boolean(from && until) && tip.includes(`from ${from[1]}`) &&
        (until[1] ? tip.includes(`until ${until[1]}`) : tip.includes('alive at the end')) &&
        numbers.every((n) => n < events), `${tip} | ${pane.slice(0, 300)}`);
    } else {
      check('a band\'s hover and its context pane name the same events', false, 'the clicked band is gone');
    }
  }

  // 5. The detail control: 20 bands drawn on their own, the rest in the grey band.
  await page.fill('#detail', '20');
  await page.locator('#detail').dispatchEvent('change');
  await page.waitForFunction(() => Number(document.getElementById('timeline').dataset.bands) <= 20, null, { timeout: 10000 });
  const bandsAt20 = await page.evaluate(() => Number(document.getElementById('timeline').dataset.bands));
  const point = await page.evaluate(() => window.memtrace.summarizedPoint());
  check('the detail control sets how many bands are drawn', bandsAt20 > 0 && bandsAt20 <= 20 && point && point.h > 3,
    `${bandsAt20} bands, summarized point ${JSON.stringify(point)}`);

  // 6. Hovering the grey band says what it holds.
  if (point) {
    await page.mouse.move(timelineBox.x + point.x, timelineBox.y + point.y);
    const tip = await tipText('allocations, .*\\n');
    check('hovering the summarized band lists what it holds',
      /summarized after event \d+: \d+ allocations, [0-9.]+ [KMG]iB/.test(tip) && /step\d\/forward\/(attention|mlp|scratch)|init\/weights|leaky_cache/.test(tip), tip);
  }

  // 7. The out-of-memory marker: hover shows the failed request, click its stack.
  const ooms = await page.evaluate(() => window.memtrace.oomMarkers());
  check('one out-of-memory marker is drawn', ooms.length === 1 && /1 out-of-memory event recorded/.test(await page.textContent('#oom-note')),
    JSON.stringify(ooms));
  if (ooms.length) {
    await page.mouse.move(timelineBox.x + ooms[0].x, timelineBox.y + 60);
    const tip = await tipText('out of memory');
    check('hovering the marker shows the failing request',
      tip.includes(`out of memory at event ${ooms[0].event}`) && tip.includes('6.00 GiB') && tip.includes('device free: 1.50 GiB') && tip.includes('step3/forward/huge'), tip);
    await page.mouse.click(timelineBox.x + ooms[0].x, timelineBox.y + 60);
    await page.waitForFunction(() => /out of memory at event/.test(document.getElementById('context-body').textContent), null, { timeout: 10000 });
    const pane = await page.textContent('#context-body');
    check('clicking the marker shows its stack', pane.includes('Model.grow  model.py:99') && pane.includes('1.50 GiB'), pane.slice(0, 300));
    // Where the device's memory was: the parts of reserved memory add up to it, and why.
    await page.waitForSelector('#context-body .explain', { timeout: 10000 });
    const explained = await page.evaluate(async (device) => {
      const r = await (await fetch(`/api/explain?device=${device}&oom=1`)).json();
      const rows = [...document.querySelectorAll('#context-body .explain tr[data-part]')].map((tr) => tr.dataset.part);
      return { rows, keys: r.explanation.parts.map((p) => p.key), sum: r.explanation.parts.reduce((a, p) => a + p.bytes, 0),
        reserved: r.explanation.reserved_bytes, why: document.querySelector('#context-body .explain p').textContent };
    }, await page.evaluate(() => window.memtrace.view.device));
    check('the marker explains where the memory was, in parts that add up',
      explained.rows.join() === explained.keys.join() && explained.sum === explained.reserved && explained.reserved > 0 &&
        explained.why.startsWith('6.00 GiB requested'), JSON.stringify(explained));
  }

  // 8. The segment timeline: the main segment and the four 512 MiB workspaces.
  const segments = await page.evaluate(() => ({
    bands: Number(document.getElementById('segment-timeline').dataset.bands),
    rects: window.memtrace.segmentRects(),
  }));
  check('the segment timeline draws every segment', segments.bands === 5, `${segments.bands} segment bands`);
  const workspace = segments.rects.find((r) => r.size === 512 * 1024 * 1024 && r.w > 5 && r.h > 3);
  if (workspace) {
    const box = await page.locator('#segment-timeline').boundingBox();
    await page.mouse.move(box.x + workspace.x + workspace.w / 2, box.y + workspace.y + workspace.h / 2);
    const tip = await tipText('segment of');
    check('hovering a segment names it', /segment of 512(\.0)? MiB on stream 0\nreserved at event \d+, released at event \d+/.test(tip), tip);
  } else {
    check('hovering a segment names it', false, 'no workspace band to hover');
  }

  // 9. The state history: pages of events, a filter, an event's stack on selection.
  const historyRows = await page.evaluate(() => document.querySelectorAll('#history tr.event').length);
  const historyStatus = await page.textContent('#history-status');
  check('the state history lists events', historyRows === 100 && /1–100 of \d+ events/.test(historyStatus), `${historyRows} rows, ${historyStatus}`);
  await page.selectOption('#history-action', 'oom');
  await page.waitForFunction(() => document.querySelectorAll('#history tr.event').length === 1, null, { timeout: 10000 });
  await page.click('#history tr.event');
  await page.waitForFunction(() => /event \d+: oom/.test(document.getElementById('context-body').textContent), null, { timeout: 10000 });
  const eventPane = await page.textContent('#context-body');
  await page.waitForFunction((i) => document.getElementById('state-index').value === String(i), ooms.length ? ooms[0].index : -1, { timeout: 10000 }).catch(() => {});
  const stateIndex = await page.inputValue('#state-index');
  check('selecting an event shows its stack and the state after it',
    eventPane.includes('Model.grow  model.py:99') && ooms.length > 0 && stateIndex === String(ooms[0].index), `${eventPane.slice(0, 200)}; state ${stateIndex}`);
  const explainedRow = await page.waitForSelector('#context-body .explain', { timeout: 10000 }).then(() => true, () => false);
  check('selecting an out-of-memory event explains it too', explainedRow, 'no explanation in the context panel');
  const stateLine = await page.textContent('#state-summary');
  check("an out-of-memory event's state line gives the device's free memory, not an address",
    /oom 6\.00 GiB requested with 1\.50 GiB free on the device/.test(stateLine) && !/oom [^.]* at 0x/.test(stateLine), stateLine);
  await page.selectOption('#history-action', '');
  const segmentsNote = await page.textContent('#segments-note');
  check('the segment map says how many segments it draws', /\d+ segments/.test(segmentsNote), segmentsNote);

  // 10. Zooming in draws more: with 20 bands drawn of far more allocations, zoom (the wheel)
  // into a window; of the allocations alive there, more are drawn on their own than the full
  // view drew, and fewer are left summarized.
  const settled = () => page.waitForFunction(() => {
    const v = window.memtrace.view;
    const p = new URLSearchParams(v.timeline.params);
    return !v.pending && p.get('from') === String(Math.floor(v.from)) && p.get('to') === String(Math.ceil(v.to));
  }, null, { timeout: 10000 });
  const full = await page.evaluate(() => ({ ...window.memtrace.view.timeline, from: window.memtrace.view.from, to: window.memtrace.view.to }));
  // Drawn at once from the answer in the page, in a window a third as wide: every band lands
  // where its allocation lived on the new scale, within one of the answer's columns
  // (stretched), not where its column was on the old one.
  const held = await page.evaluate(() => {
    const m = window.memtrace;
    const v = m.view;
    const [from, to] = [v.from, v.to];
    v.from = from + (to - from) / 3;
    v.to = from + (2 * (to - from)) / 3;
    const previews = v.previews;
    m.drawHeld();
    const width = document.getElementById('timeline').clientWidth;
    const x = (value) => ((value - v.from) / (v.to - v.from)) * width;
    const column = ((to - from) / v.timeline.total.length / (v.to - v.from)) * width;
    const misplaced = m.bandRects().filter((r) => {
      const band = v.timeline.bands.find((b) => b.id === r.id);
      return r.x < x(band.start) - column - 1 || r.x + r.w > x(band.end) + column + 1;
    }).length;
    const drawn = m.bandRects().length;
    [v.from, v.to] = [from, to];
    m.drawHeld();
    return { drawn, misplaced, previewed: v.previews - previews };
  });
  check('zooming draws the answer in the page at once, each band where it lived',
    held.previewed === 2 && held.drawn > 0 && held.misplaced === 0, JSON.stringify(held));
  const counted = await page.evaluate(() => { const v = window.memtrace.view; return { moves: v.moves, previews: v.previews, requests: v.requests }; });
  // Measured again: the steps above may have scrolled the page.
  await page.locator('#timeline').scrollIntoViewIfNeeded();
  const wheelBox = await page.locator('#timeline').boundingBox();
  await page.mouse.move(wheelBox.x + wheelBox.width * 0.4, wheelBox.y + 150);
  for (let i = 0; i < 6; i += 1) { await page.mouse.wheel(0, -100); await page.waitForTimeout(50); }
  await settled();
  const zoomed = await page.evaluate(() => ({ ...window.memtrace.view.timeline, from: window.memtrace.view.from, to: window.memtrace.view.to }));
  const inWindow = full.bands.filter((b) => b.start < zoomed.to && b.end > zoomed.from).length;
  const ids = new Set(full.bands.map((b) => b.id));
  const fresh = zoomed.bands.filter((b) => !ids.has(b.id)).length;
  const zoomNote = `window ${Math.round(zoomed.from)}–${Math.round(zoomed.to)} of ${Math.round(full.to)}: full view drew ${inWindow} of the bands there ` +
    `(${full.bands.length} of ${full.matched}), zoomed draws ${zoomed.bands.length} of ${zoomed.matched}, ${fresh} new`;
  console.log(`zoom: ${zoomNote}`);
  check('zooming in draws more of the window',
    zoomed.to - zoomed.from < (full.to - full.from) / 2 && full.matched > 20 && zoomed.bands.length > inWindow && fresh > 0 &&
      zoomed.matched - zoomed.bands.length < full.matched - full.bands.length, zoomNote);
  const wheeled = await page.evaluate(() => { const v = window.memtrace.view; return { moves: v.moves, previews: v.previews, requests: v.requests }; });
  const moved = wheeled.moves - counted.moves;
  check('each wheel step drew from the page before the server answered',
    moved > 0 && wheeled.previews - counted.previews === moved && wheeled.requests > counted.requests,
    `${moved} zooms, ${wheeled.previews - counted.previews} drawn from the page, ${wheeled.requests - counted.requests} asked`);
  // Back to the whole window, whose answers the page holds: drawn again with no request.
  const requestsZoomed = wheeled.requests;
  await page.click('#reset');
  await settled();
  const back = await page.evaluate(() => ({ requests: window.memtrace.view.requests, bands: window.memtrace.bandRects().length, timeline: window.memtrace.view.timeline.bands.length }));
  check('a window seen before is drawn from the page, with no request',
    back.requests === requestsZoomed && back.timeline === full.bands.length, JSON.stringify(back));

  // 11. Eight API requests at once (Chromium opens at most 6 connections to one host and
  // queues the rest): all answer, within a few seconds.
  const burst = await page.evaluate(async () => {
    const paths = ['/api/meta', '/api/ooms?device=0', '/api/leaks?device=0', '/api/breakdown?device=0',
      '/api/state?device=0', '/api/tree?device=0', '/api/events?device=0&offset=0&limit=100',
      '/api/curves?device=0&axis=event&from=0&to=1000&width=500'];
    const start = performance.now();
    const timeout = new Promise((resolve) => setTimeout(() => resolve('timeout'), 5000));
    const all = Promise.all(paths.map((p) => fetch(p).then((r) => r.status)));
    const result = await Promise.race([all, timeout]);
    return { result, ms: Math.round(performance.now() - start) };
  });
  check('eight concurrent API requests all answer', Array.isArray(burst.result) && burst.result.every((st) => st === 200),
    JSON.stringify(burst));
  console.log(`eight concurrent requests answered in ${burst.ms} ms`);

  // For the screenshot: a detail that leaves some grey, and the OOM's state.
  await page.fill('#detail', '200');
  await page.locator('#detail').dispatchEvent('change');
  await page.waitForFunction(() => Number(document.getElementById('timeline').dataset.bands) > 20, null, { timeout: 10000 }).catch(() => {});
  await page.mouse.move(0, 0);

  check('no script errors', errors.length === 0, errors.join('; '));
  check('no request leaves the server', outside.length === 0, outside.join(', '));
  const shot = join(outDir, 'memtrace-viewer.png');
  await page.screenshot({ path: shot, fullPage: true });
  console.log(`screenshot: ${shot}`);

  // 12. A file without timestamps: the time axis is offered disabled, the page says the x axis
  // counts events, and the timeline spans the events.
  const work = mkdtempSync(join(tmpdir(), 'memtrace-untimed-'));
  const untimedEvents = untimedTrace(join(work, 'untimed.jsonl'));
  const untimed = await serve([join(work, 'untimed.jsonl')]);
  servers.push(untimed.child);
  const plain = await browser.newPage({ viewport: { width: 1400, height: 1100 } });
  const plainErrors = [];
  plain.on('pageerror', (e) => plainErrors.push(String(e)));
  await plain.goto(untimed.url);
  await plain.waitForSelector('body[data-ready="1"]', { timeout: 30000 });
  const axis = await plain.evaluate(() => ({
    disabled: document.querySelector('#axis option[value="time"]').disabled,
    value: document.getElementById('axis').value,
    note: document.getElementById('axis-note').textContent,
    hasTimes: window.memtrace.view.meta.devices[0].has_times,
    window: [window.memtrace.view.from, window.memtrace.view.to],
    params: window.memtrace.view.timeline.params,
  }));
  check('a file without times offers no time axis',
    axis.disabled && axis.value === 'event' && axis.note === 'no times recorded in this file: the x axis counts events' &&
      axis.hasTimes === false && axis.window[0] === 0 && axis.window[1] === untimedEvents + 1 && /axis=event/.test(axis.params),
    JSON.stringify(axis));
  check('no script errors on the untimed page', plainErrors.length === 0, plainErrors.join('; '));

  // 13. Memory by stream: a new stream per call strands each call's segment; the panel splits
  // the reserved peak, names the wait, charts the streams and gives the policy's what-if.
  streamPerCallTrace(join(work, 'streams.jsonl'));
  const streamed = await serve([join(work, 'streams.jsonl')]);
  servers.push(streamed.child);
  const sp = await browser.newPage({ viewport: { width: 1400, height: 1100 } });
  const streamErrors = [];
  sp.on('pageerror', (e) => streamErrors.push(String(e)));
  await sp.goto(streamed.url);
  await sp.waitForSelector('body[data-ready="1"]', { timeout: 30000 });
  await sp.waitForFunction(() => document.getElementById('streams').tBodies[0].rows.length > 1, null, { timeout: 30000 });
  const panel = await sp.evaluate(() => {
    const canvas = document.getElementById('stream-chart');
    const pixels = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
    let inked = 0;
    for (let i = 3; i < pixels.length; i += 4) if (pixels[i] > 0) inked += 1;
    return {
      summary: document.getElementById('streams-summary').innerText,
      rows: [...document.getElementById('streams').tBodies[0].rows].slice(1).map((r) => r.innerText),
      legend: document.getElementById('stream-legend').innerText,
      inked,
    };
  });
  check('the streams panel splits the reserved peak and finds the stranded memory',
    panel.summary.includes('200.0 MiB reserved = 0 B allocated + 0 B waiting for other streams + 200.0 MiB cached, of which 160.0 MiB stranded') &&
      panel.summary.includes('Stranded: up to 160.0 MiB at once (after event 14) on 4 stream(s)') &&
      panel.summary.includes('Waiting for other streams (record_stream): 1 free(s), 40.0 MiB; up to 40.0 MiB at once (after event 10); the longest wait 3 events, 3 µs.') &&
      panel.summary.includes('stream_reuse:ordered: peak reserved 40.0 MiB instead of 200.0 MiB (160.0 MiB less)'),
    panel.summary);
  check('the streams panel lists and charts every stream',
    panel.rows.length === 5 && panel.rows.some((r) => r.startsWith('stream 0x3')) && panel.inked > 300 &&
      panel.legend.includes('cached, stream 0x5') && panel.legend.includes('stranded'),
    JSON.stringify(panel));
  check('no script errors on the streams page', streamErrors.length === 0, streamErrors.join('; '));
} finally {
  await browser.close();
  for (const child of servers) child.kill();
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
