// memtrace's viewer. Everything heavy (level of detail, stacking, filtering) is computed by
// the server; this page asks for a window at its pixel width and draws what comes back.
// Zooming and panning draw at once from the answers already in the page (stretched to the new
// window), then draw the server's sharper answer; a window asked for before is drawn again
// from the page, with no request.
// Text from the trace is only ever set with textContent, never parsed as HTML. The drawing is
// in chart.js and the panels below the charts in panels.js, both loaded before this file.
'use strict';

const $ = (id) => document.getElementById(id);

const view = {
  meta: null, device: null, axis: 'event', from: 0, to: 1,
  timeline: null, curves: null, segments: null, state: null, targets: [], blockTargets: [],
  segmentTargets: [], ooms: [], oomTargets: [], history: null, historyOffset: 0,
  selectedEvent: null, limit: 15000, loads: 0, pending: null, streamMemory: null,
  // Zooms and pans, window answers asked of the server, and drawings from answers already in
  // the page.
  moves: 0, requests: 0, previews: 0,
};

const HISTORY_PAGE = 100;

function parseSize(text) {
  const m = /^\s*([0-9.]+)\s*([kmgt]?)i?b?\s*$/i.exec(text);
  if (!m) return null;
  const scale = { '': 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3, t: 1024 ** 4 }[m[2].toLowerCase()];
  return Math.floor(Number(m[1]) * scale);
}

// The file of a `memtrace serve A B ...` this viewer shows: `file=N` in the page address (the
// comparison page links each file here), passed on to every API call; null: the first file.
const FILE = new URLSearchParams(location.search).get('file');

function apiPath(path) {
  if (FILE === null) return path;
  return `${path}${path.includes('?') ? '&' : '?'}file=${encodeURIComponent(FILE)}`;
}

async function getJSON(path) {
  const response = await fetch(apiPath(path));
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

// The window answers (timeline, segments, curves) already in the page, by request, newest
// last: a window seen before is drawn from here. A file's answers never change while it is
// served, so nothing here goes stale.
const answers = new Map();
const ANSWERS_KEPT = 24;

// The answer to `path` for the window [from, to): from the page when it was asked before,
// else from the server. The answer keeps its window, so it can be drawn in another.
async function getWindowAnswer(path, from, to) {
  const kept = answers.get(path);
  if (kept) {
    answers.delete(path);
    answers.set(path, kept);
    return kept;
  }
  view.requests += 1;
  const answer = await getJSON(path);
  answer.from = from;
  answer.to = to;
  answers.set(path, answer);
  if (answers.size > ANSWERS_KEPT) answers.delete(answers.keys().next().value);
  return answer;
}

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = text;
  if (cls) e.className = cls;
  return e;
}

// Events are named by the file's own numbers (PyTorch's index in device_traces): the events
// the import inserted (external annotations) have none. Positions and states are the
// server's; these mirror blockpool::trace::EventNumbers.
function insertedUpTo(position) {
  const inserted = deviceMeta().inserted_events || [];
  let lo = 0, hi = inserted.length;
  while (lo < hi) { const mid = (lo + hi) >> 1; if (inserted[mid] <= position) lo = mid + 1; else hi = mid; }
  return lo;
}

// The state after the first `state` events: "after event N", or "before event 0".
function stateLabel(state) {
  const last = Math.min(state, deviceMeta().events) - 1;
  const number = last < 0 ? -1 : last - insertedUpTo(last);
  return number < 0 ? 'before event 0' : `after event ${number}`;
}

// The event at `position`: "event N", or an inserted annotation between numbered events.
function eventLabel(position) {
  const inserted = deviceMeta().inserted_events || [];
  const upTo = insertedUpTo(position);
  if (upTo === 0 || inserted[upTo - 1] !== position) return `event ${position - upTo}`;
  return `annotation ${stateLabel(position + 1)}`;
}

// Where a band starts or ends: the event that made its state (`state` is the first state it
// is alive in, or the first it is no longer alive in).
function bandEventLabel(state) {
  return state === 0 ? 'before the trace began' : eventLabel(state - 1);
}

// A band's life in the file's event numbers, the same words wherever it is shown: `end` past
// the last state (or null) is alive at the end.
function bandSpanLabel(start, end) {
  const until = end === null || end > deviceMeta().events ? 'alive at the end' : `until ${bandEventLabel(end)}`;
  return `from ${bandEventLabel(start)}, ${until}`;
}

// How many of a device's events the file numbers (its own, not the inserted annotations).
function numberedEvents(device) {
  return device.events - (device.inserted_events || []).length;
}

function deviceMeta() {
  return view.meta.devices.find((d) => d.device === view.device) || view.meta.devices[0];
}

function fullWindow() {
  const d = deviceMeta();
  return view.axis === 'event' ? [0, d.events + 1] : [d.first_us, d.last_us + 1];
}

function filterParams() {
  const p = new URLSearchParams();
  const q = $('search').value.trim();
  if (q) p.set('q', q);
  if ($('stream').value) p.set('stream', $('stream').value);
  const min = parseSize($('min-size').value);
  const max = parseSize($('max-size').value);
  if (min !== null) p.set('min_size', String(min));
  if (max !== null) p.set('max_size', String(max));
  return p;
}

function windowParams(width) {
  const p = new URLSearchParams({
    device: String(view.device), axis: view.axis,
    from: String(Math.floor(view.from)), to: String(Math.ceil(view.to)), width: String(width),
  });
  return p;
}

// The window answer to `/api/{what}?params`, for the window the params ask for.
function windowAnswer(what, params) {
  return getWindowAnswer(`/api/${what}?${params}`, Number(params.get('from')), Number(params.get('to')));
}

// ---- timeline ---------------------------------------------------------------------------

function timelineParams(width) {
  const params = windowParams(width);
  for (const [k, v] of filterParams()) params.set(k, v);
  params.set('limit', String(view.limit));
  return params;
}

async function loadTimeline() {
  const canvas = $('timeline');
  const width = Math.max(100, Math.floor(canvas.clientWidth));
  const params = timelineParams(width);
  const timeline = await windowAnswer('timeline', params);
  timeline.params = params.toString();
  view.timeline = timeline;
  drawTimeline();
}

function drawTimeline() {
  const t = view.timeline;
  const canvas = $('timeline');
  const drawn = drawBands(canvas, t, (band) => band.site);
  view.targets = drawn.targets;
  view.timelineScale = drawn;
  canvas.dataset.bands = String(t.bands.length);
  canvas.dataset.matched = String(t.matched);
  const shown = t.bands.length;
  const capped = t.limit < Math.min(view.limit, t.matched)
    ? ` (at most ${t.limit} here: more would exceed the response's run cap; zoom in for more)` : '';
  // The rest are in the grey band where a column's state holds them; an allocation alive only
  // between the states the columns show is in neither (zooming in shows it).
  $('status').textContent = `${t.matched} allocations in view: ${shown} drawn on their own, ` +
    `the other ${t.matched - shown} summed in the grey band or too short-lived for this zoom${capped}`;
}

async function loadSegmentTimeline() {
  const canvas = $('segment-timeline');
  const width = Math.max(100, Math.floor(canvas.clientWidth));
  const params = windowParams(width);
  params.set('limit', String(Math.max(view.limit, 1)));
  view.segments = await windowAnswer('segments', params);
  drawSegmentTimeline();
}

function drawSegmentTimeline() {
  const t = view.segments;
  const canvas = $('segment-timeline');
  const drawn = drawBands(canvas, t, (band) => `segment ${band.id * 7919} on ${band.stream}`, true);
  view.segmentTargets = drawn.targets;
  canvas.dataset.bands = String(t.bands.length);
  const reserved = Math.max(0, ...t.total);
  $('segment-status').textContent = `${t.matched} reserved segments (or mapped ranges) in view, ` +
    `${t.bands.length} drawn on their own; highest reserved here ${fmtBytes(reserved)}. ` +
    'Each band is one segment from the event that reserved it to the one that released it; hover for it.';
}

// ---- curves -----------------------------------------------------------------------------

async function loadCurves() {
  const canvas = $('curves');
  const width = Math.max(100, Math.floor(canvas.clientWidth));
  view.curves = await windowAnswer('curves', windowParams(width));
  drawCurves();
}

function drawCurves() {
  const c = view.curves;
  const canvas = $('curves');
  const { ctx, width, height } = sizeCanvas(canvas);
  ctx.clearRect(0, 0, width, height);
  const plotHeight = height - AXIS - 4;
  const max = Math.max(1, ...c.reserved, ...c.active, ...c.allocated);
  drawGrid(ctx, width, max, 4, plotHeight);
  const columns = c.allocated.length;
  const line = (values, color, scale) => {
    ctx.strokeStyle = color;
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    values.forEach((v, i) => {
      const x = columnX(c, columns, i + 0.5, width);
      const y = 4 + plotHeight - v * scale;
      if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
    });
    ctx.stroke();
  };
  line(c.reserved, '#ea580c', plotHeight / max);
  line(c.allocated, '#2563eb', plotHeight / max);
  line(c.requested, '#16a34a', plotHeight / max);
  ctx.setLineDash([4, 3]);
  line(c.fragmentation, '#dc2626', plotHeight);
  ctx.setLineDash([]);
  if (view.state) {
    const xs = view.axis === 'event' ? view.state.index : null;
    if (xs !== null) {
      ctx.strokeStyle = '#111';
      const x = xOfValue(xs, width);
      ctx.beginPath(); ctx.moveTo(x, 0); ctx.lineTo(x, height - AXIS); ctx.stroke();
    }
  }
  drawOoms(ctx, width, 4, 4 + plotHeight);
  drawAxis(ctx, width, height, max, 4, plotHeight, true);
}

// ---- allocator state --------------------------------------------------------------------

async function loadState(index) {
  const query = new URLSearchParams({ device: String(view.device) });
  if (index !== undefined && index !== null) query.set('index', String(index));
  try {
    view.state = await getJSON('/api/state?' + query);
  } catch (e) {
    $('state-summary').textContent = String(e.message);
    $('state-summary').className = 'error';
    return;
  }
  $('state-summary').className = '';
  $('state-index').value = String(view.state.index);
  drawState();
  if (view.curves) drawCurves();
  if (window.memtraceTree) window.memtraceTree.show(view.device, view.state.index);
  markHistory();
}

// ---- context pane -----------------------------------------------------------------------

async function showAllocation(id) {
  const a = await getJSON(`/api/allocation?device=${view.device}&id=${id}`);
  const end = a.end === null || a.end > deviceMeta().events
    ? 'alive at the end' : `${bandEventLabel(a.end)} (${fmtTime(a.end_us)})`;
  showContext(`allocation ${a.id}`, [
    ['size', `${fmtBytes(a.size)} (asked ${fmtBytes(a.requested)})`], ['address', a.addr],
    ['stream', String(a.stream)], ['from', `${bandEventLabel(a.start)} (${fmtTime(a.start_us)})`], ['until', end],
  ], a.context);
}

async function showBlock(block) {
  const context = await getJSON(`/api/context?id=${block.context}`);
  showContext('block', [
    ['size', fmtBytes(block.size)], ['requested', fmtBytes(block.requested)],
    ['state', ['allocated', 'pending free', 'free'][block.state]],
  ], context);
}

// ---- interaction ------------------------------------------------------------------------

async function refresh() {
  // One refresh at a time; a newer request replaces a waiting one.
  if (view.pending) { view.pending.again = true; return view.pending.done; }
  const pending = { again: false };
  view.pending = pending;
  pending.done = (async () => {
    do {
      pending.again = false;
      try {
        await Promise.all([loadTimeline(), loadCurves(), loadSegmentTimeline()]);
      } catch (e) {
        $('status').textContent = 'error: ' + e.message;
      }
    } while (pending.again);
    view.pending = null;
    view.loads += 1;
  })();
  return pending.done;
}

// Draws the answers in the page in the view's window at once, stretched or cut to it, while
// the server's answer for the window is on its way.
function drawHeld() {
  if (!view.timeline || !view.curves || !view.segments) return;
  view.previews += 1;
  drawTimeline();
  drawCurves();
  drawSegmentTimeline();
}

function zoom(canvas, clientX, factor) {
  const rect = canvas.getBoundingClientRect();
  const at = view.from + ((clientX - rect.left) / rect.width) * (view.to - view.from);
  const [lo, hi] = fullWindow();
  const span = Math.min(hi - lo, Math.max(8, (view.to - view.from) * factor));
  view.from = Math.max(lo, at - (at - view.from) * (span / (view.to - view.from)));
  view.to = Math.min(hi, view.from + span);
  view.from = Math.max(lo, view.to - span);
  view.moves += 1;
  drawHeld();
  refresh();
}

function attachPanZoom(canvas, onClick) {
  let drag = null;
  canvas.addEventListener('wheel', (e) => {
    e.preventDefault();
    zoom(canvas, e.clientX, e.deltaY > 0 ? 1.25 : 0.8);
  }, { passive: false });
  canvas.addEventListener('mousedown', (e) => {
    drag = { x: e.clientX, from: view.from, to: view.to, moved: false };
  });
  window.addEventListener('mousemove', (e) => {
    if (!drag) return;
    const dx = e.clientX - drag.x;
    if (Math.abs(dx) > 3) drag.moved = true;
    if (!drag.moved) return;
    const [lo, hi] = fullWindow();
    const span = drag.to - drag.from;
    const shift = (-dx / canvas.clientWidth) * span;
    view.from = Math.min(hi - span, Math.max(lo, drag.from + shift));
    view.to = view.from + span;
    view.moves += 1;
    drawHeld();
    refresh();
  });
  window.addEventListener('mouseup', (e) => {
    if (drag && !drag.moved && e.target === canvas) {
      const rect = canvas.getBoundingClientRect();
      onClick(e.clientX - rect.left, e.clientY - rect.top, rect.width);
    }
    drag = null;
  });
}

// Which column of the timeline and whether y is in its grey summarized band.
function summarizedAt(x, y) {
  const t = view.timeline;
  const scale = view.timelineScale;
  if (!t || !scale) return null;
  const c = scale.column(x);
  if (c < 0 || t.other[c] <= 0) return null;
  const top = scale.y(t.total[c]);
  const bottom = scale.y(t.total[c] - t.other[c]);
  return y >= top - 1 && y <= bottom + 1 ? c : null;
}

function placeTip(tip, e, text) {
  tip.textContent = text;
  tip.style.left = Math.min(window.innerWidth - 430, e.clientX + 12) + 'px';
  tip.style.top = e.clientY + 12 + 'px';
  tip.hidden = false;
}

function summarizedText(s) {
  const lines = [`summarized ${stateLabel(s.state)}: ${s.allocations} allocations, ${fmtBytes(s.bytes)}`,
    'not drawn on their own (raise "bands drawn" or zoom in to draw them); biggest sites:'];
  for (const site of s.sites) lines.push(`  ${fmtBytes(site.bytes)} in ${site.allocations}  ${site.site}`);
  if (s.more_sites) lines.push(`  and ${s.more_sites} more sites`);
  return lines.join('\n');
}

function setupTooltip() {
  const canvas = $('timeline');
  const tip = $('tooltip');
  let asked = null;
  canvas.addEventListener('mousemove', async (e) => {
    const rect = canvas.getBoundingClientRect();
    const x = e.clientX - rect.left;
    const y = e.clientY - rect.top;
    const oom = oomAt(x);
    if (oom) { placeTip(tip, e, oomText(oom.oom)); return; }
    const band = bandAt(x, y);
    if (band) {
      placeTip(tip, e, `${fmtBytes(band.size)}  ${band.site}\nstream ${band.stream}, ${bandSpanLabel(band.start, band.end)}\nclick for its context`);
      return;
    }
    const c = summarizedAt(x, y);
    if (c === null) { tip.hidden = true; asked = null; return; }
    const t = view.timeline;
    const key = t.params + '&column=' + c;
    if (view.summarized && view.summarized.key === key) { placeTip(tip, e, summarizedText(view.summarized.value)); return; }
    placeTip(tip, e, `summarized: ${fmtBytes(t.other[c])} (asking what it holds…)`);
    if (asked === key) return;
    asked = key;
    try {
      const value = await getJSON('/api/summarized?' + key);
      view.summarized = { key, value };
      if (asked === key && !tip.hidden) placeTip(tip, e, summarizedText(value));
    } catch (err) {
      placeTip(tip, e, 'summarized: ' + err.message);
    }
  });
  canvas.addEventListener('mouseleave', () => { tip.hidden = true; asked = null; });
  const segments = $('segment-timeline');
  segments.addEventListener('mousemove', (e) => {
    const rect = segments.getBoundingClientRect();
    const x = e.clientX - rect.left;
    const oom = oomAt(x);
    if (oom) { placeTip(tip, e, oomText(oom.oom)); return; }
    const y = e.clientY - rect.top;
    const r = view.segmentTargets.slice().reverse().find((t) => x >= t.x && x <= t.x + t.w && y >= t.y && y <= t.y + t.h);
    if (!r) { tip.hidden = true; return; }
    const b = r.band;
    const end = b.end > deviceMeta().events ? 'still reserved at the end' : `released at ${bandEventLabel(b.end)}`;
    placeTip(tip, e, `segment of ${fmtBytes(b.size)} on stream ${b.stream}\nreserved at ${bandEventLabel(b.start)}, ${end}\nsite: ${b.site}`);
  });
  segments.addEventListener('mouseleave', () => { tip.hidden = true; });
}

function debounce(fn, ms) {
  let timer = null;
  return () => { clearTimeout(timer); timer = setTimeout(fn, ms); };
}

async function selectDevice(device) {
  view.device = device;
  view.streamMemory = null;
  [view.from, view.to] = fullWindow();
  const streams = $('stream');
  streams.replaceChildren(el('option', 'all streams'));
  streams.firstChild.value = '';
  for (const s of deviceMeta().streams) { const o = el('option', 'stream ' + s); o.value = String(s); streams.append(o); }
  $('state-index').max = String(deviceMeta().events);
  const timed = deviceMeta().has_times;
  $('axis').querySelector('option[value="time"]').disabled = !timed;
  if (!timed && view.axis === 'time') { view.axis = 'event'; $('axis').value = 'event'; [view.from, view.to] = fullWindow(); }
  $('axis-note').textContent = timed ? '' : 'no times recorded in this file: the x axis counts events';
  view.historyOffset = 0;
  view.selectedEvent = null;
  // A few requests at a time: the drawings first, then the tables.
  await loadOoms();
  await refresh();
  await Promise.all([loadState(null), loadTables()]);
  await loadHistory();
  // Memory by stream walks the whole trace once per device: it fills its panel when it comes,
  // without holding up the rest of the page.
  loadStreams().catch((e) => { $('streams-summary').textContent = `memory by stream: ${e.message}`; });
}

// One file of several: its label beside the path, and a link back to the comparison page.
async function showFileOfComparison() {
  const c = await fetch('/api/compare').then((r) => (r.ok ? r.json() : null)).catch(() => null);
  const f = c && c.files.find((x) => String(x.file) === FILE);
  if (!f || c.files.length < 2) return;
  $('file').textContent = `${f.label}, one of ${c.files.length} files served: ${view.meta.file} (${view.meta.format})`;
  document.title = `memtrace: ${f.label}`;
  const back = $('back');
  back.href = '/';
  back.hidden = false;
}

async function main() {
  view.meta = await getJSON('/api/meta');
  $('file').textContent = `${view.meta.file} (${view.meta.format})`;
  if (FILE !== null) await showFileOfComparison();
  if (!view.meta.devices.length) { $('status').textContent = 'this trace has no devices'; return; }
  for (const d of view.meta.devices) { const o = el('option', `${d.device} (${numberedEvents(d)} events)`); o.value = String(d.device); $('device').append(o); }
  $('device').addEventListener('change', () => selectDevice(Number($('device').value)));
  $('axis').addEventListener('change', () => { view.axis = $('axis').value; [view.from, view.to] = fullWindow(); refresh(); });
  $('reset').addEventListener('click', () => { [view.from, view.to] = fullWindow(); refresh(); });
  const refilter = debounce(refresh, 200);
  for (const id of ['search', 'min-size', 'max-size']) $(id).addEventListener('input', refilter);
  $('search').addEventListener('input', drawTables);
  $('leak-step').addEventListener('input', debounce(loadTables, 300));
  $('stream').addEventListener('change', refresh);
  $('state-index').addEventListener('change', () => loadState(Number($('state-index').value)));
  $('state-peak').addEventListener('click', () => loadState(null));
  const readDetail = () => {
    const n = Math.floor(Number($('detail').value));
    view.limit = Number.isFinite(n) ? Math.min(100000, Math.max(0, n)) : 15000;
    refresh();
  };
  $('detail').addEventListener('change', readDetail);
  $('detail').addEventListener('input', debounce(readDetail, 300));
  const rehistory = () => { view.historyOffset = 0; loadHistory(); };
  $('history-action').addEventListener('change', rehistory);
  $('history-search').addEventListener('input', debounce(rehistory, 200));
  $('history-prev').addEventListener('click', () => { view.historyOffset = Math.max(0, view.historyOffset - HISTORY_PAGE); loadHistory(); });
  $('history-next').addEventListener('click', () => { view.historyOffset += HISTORY_PAGE; loadHistory(); });
  attachPanZoom($('timeline'), (x, y, width) => {
    const oom = oomAt(x);
    if (oom) { showOom(oom.oom); return; }
    const band = bandAt(x, y);
    if (band) showAllocation(band.id); else loadState(stateAtX(x, width));
  });
  attachPanZoom($('segment-timeline'), (x, y, width) => {
    const oom = oomAt(x);
    if (oom) { showOom(oom.oom); return; }
    const states = view.segments ? view.segments.states : [];
    if (states.length) loadState(states[Math.min(states.length - 1, Math.max(0, Math.floor((x / width) * states.length)))]);
  });
  attachPanZoom($('curves'), (x, y, width) => {
    const oom = oomAt(x);
    if (oom) { showOom(oom.oom); return; }
    const states = view.curves.states;
    loadState(states[Math.min(states.length - 1, Math.max(0, Math.floor((x / width) * states.length)))]);
  });
  $('segments').addEventListener('click', (e) => {
    const rect = $('segments').getBoundingClientRect();
    const block = blockAt(e.clientX - rect.left, e.clientY - rect.top);
    if (block) showBlock(block);
  });
  setupTooltip();
  window.addEventListener('resize', debounce(() => { refresh(); if (view.state) drawState(); if (view.streamMemory) drawStreamChart(view.streamMemory.chart); }, 150));
  view.limit = Number($('detail').value) || 15000;
  // The device the server opens by default: its first out-of-memory event's, else the busiest.
  const opened = view.meta.default_device ?? view.meta.devices[0].device;
  $('device').value = String(opened);
  await selectDevice(opened);
  document.body.dataset.ready = '1';
}

// For automation and the browser test: where each drawn band is, in CSS pixels of the
// timeline canvas.
window.memtrace = {
  view,
  meta: () => view.meta,
  drawHeld,
  bandRects: () => view.targets.map((r) => ({ id: r.band.id, site: r.band.site, x: r.x, y: r.y, w: r.w, h: r.h })),
  // The widest stretch of the grey summarized band: a point inside it, or null.
  summarizedPoint: () => {
    const t = view.timeline;
    const s = view.timelineScale;
    if (!t || !s) return null;
    let best = null;
    t.other.forEach((o, c) => {
      const h = s.y(t.total[c] - o) - s.y(t.total[c]);
      if (o > 0 && (!best || h > best.h)) best = { c, h, x: s.x(c + 0.5), y: s.y(t.total[c]) + h / 2 };
    });
    return best;
  },
  oomMarkers: () => view.oomTargets.map((o) => ({ x: o.x, index: o.oom.index, event: o.oom.event })),
  segmentRects: () => view.segmentTargets.map((r) => ({ id: r.band.id, size: r.band.size, x: r.x, y: r.y, w: r.w, h: r.h })),
};

main().catch((e) => { $('status').textContent = 'error: ' + e.message; $('status').className = 'error'; });
