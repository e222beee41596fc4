// memtrace's viewer. Everything heavy (level of detail, stacking, filtering) is computed by
// the server; this page asks for a window at its pixel width and draws what comes back.
// Text from the trace is only ever set with textContent, never parsed as HTML.
'use strict';

const $ = (id) => document.getElementById(id);
const view = {
  meta: null, device: null, axis: 'event', from: 0, to: 1,
  timeline: null, curves: null, state: null, targets: [], blockTargets: [],
  loads: 0, pending: null,
};

function fmtBytes(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  let v = Number(n);
  while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
  return (i === 0 ? String(v) : v.toFixed(v < 10 ? 2 : 1)) + ' ' + units[i];
}

function fmtTime(us) {
  if (us >= 1e6) return (us / 1e6).toFixed(3) + ' s';
  if (us >= 1e3) return (us / 1e3).toFixed(2) + ' ms';
  return us + ' µs';
}

function parseSize(text) {
  const m = /^\s*([0-9.]+)\s*([kmgt]?)i?b?\s*$/i.exec(text);
  if (!m) return null;
  const scale = { '': 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3, t: 1024 ** 4 }[m[2].toLowerCase()];
  return Math.floor(Number(m[1]) * scale);
}

function colorOf(text) {
  let h = 0;
  for (let i = 0; i < text.length; i += 1) h = (h * 31 + text.charCodeAt(i)) >>> 0;
  return `hsl(${h % 360}, 62%, ${52 + (h >> 9) % 16}%)`;
}

async function getJSON(path) {
  const response = await fetch(path);
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = text;
  if (cls) e.className = cls;
  return e;
}

function sizeCanvas(canvas) {
  const ratio = window.devicePixelRatio || 1;
  const width = Math.max(100, Math.floor(canvas.clientWidth));
  const height = canvas.height / (canvas._ratio || 1);
  canvas._ratio = ratio;
  canvas.width = width * ratio;
  canvas.height = height * ratio;
  canvas.style.height = height + 'px';
  const ctx = canvas.getContext('2d');
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  return { ctx, width, height };
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

// ---- timeline ---------------------------------------------------------------------------

const STRIP = 16; // annotation strip height, CSS px
const AXIS = 18;  // tick labels height

function xOfValue(value, width) {
  return ((value - view.from) / (view.to - view.from)) * width;
}

async function loadTimeline() {
  const canvas = $('timeline');
  const width = Math.max(100, Math.floor(canvas.clientWidth));
  const params = windowParams(width);
  for (const [k, v] of filterParams()) params.set(k, v);
  view.timeline = await getJSON('/api/timeline?' + params);
  drawTimeline();
}

function drawTimeline() {
  const t = view.timeline;
  const canvas = $('timeline');
  const { ctx, width, height } = sizeCanvas(canvas);
  ctx.clearRect(0, 0, width, height);
  const plotTop = STRIP + 2;
  const plotHeight = height - plotTop - AXIS;
  const columns = t.total.length;
  const colWidth = width / columns;
  const maxTotal = Math.max(1, ...t.total);
  const scale = plotHeight / maxTotal;
  const y = (bytes) => plotTop + plotHeight - bytes * scale;
  view.targets = [];
  for (const band of t.bands) {
    ctx.fillStyle = colorOf(band.site);
    for (const [c0, c1, below] of band.runs) {
      const rect = {
        x: c0 * colWidth, w: Math.max(1, (c1 - c0) * colWidth),
        y: y(below + band.size), h: Math.max(1, band.size * scale), band,
      };
      ctx.fillRect(rect.x, rect.y, rect.w, rect.h);
      view.targets.push(rect);
    }
  }
  ctx.fillStyle = 'rgba(120, 128, 140, 0.55)';
  for (let c = 0; c < columns; c += 1) {
    if (t.other[c] > 0) {
      const top = y(t.total[c]);
      ctx.fillRect(c * colWidth, top, colWidth + 0.5, y(t.total[c] - t.other[c]) - top);
    }
  }
  drawAnnotations(ctx, width);
  drawAxis(ctx, width, height, maxTotal, plotTop, plotHeight);
  canvas.dataset.bands = String(t.bands.length);
  canvas.dataset.matched = String(t.matched);
  const shown = t.bands.length;
  $('status').textContent = `${t.matched} allocations in view: ${shown} drawn on their own, ` +
    `${t.matched - shown} summarized (grey)`;
}

function drawAnnotations(ctx, width) {
  const d = deviceMeta();
  ctx.font = '10px system-ui, sans-serif';
  ctx.textBaseline = 'middle';
  for (const a of d.annotations) {
    if (a.depth !== 0) continue;
    const [s, e] = view.axis === 'event' ? [a.start, a.end] : [a.start_us, a.end_us];
    const x0 = Math.max(0, xOfValue(s, width));
    const x1 = Math.min(width, xOfValue(e, width));
    if (x1 < 0 || x0 > width || x1 - x0 < 1) continue;
    ctx.fillStyle = colorOf(a.tag);
    ctx.globalAlpha = 0.35;
    ctx.fillRect(x0, 0, x1 - x0, STRIP);
    ctx.globalAlpha = 1;
    ctx.fillStyle = '#1d2330';
    if (x1 - x0 > 30) ctx.fillText(a.tag, x0 + 3, STRIP / 2, x1 - x0 - 4);
  }
}

function drawAxis(ctx, width, height, maxBytes, plotTop, plotHeight) {
  ctx.fillStyle = '#667085';
  ctx.font = '10px system-ui, sans-serif';
  ctx.textBaseline = 'top';
  for (let i = 0; i <= 4; i += 1) {
    const value = view.from + ((view.to - view.from) * i) / 4;
    const label = view.axis === 'event' ? 'event ' + Math.floor(value) : fmtTime(Math.floor(value));
    const x = Math.min(width - 70, (width * i) / 4);
    ctx.fillText(label, Math.max(0, x), height - AXIS + 4);
  }
  ctx.textBaseline = 'top';
  ctx.fillText(fmtBytes(maxBytes), 2, plotTop);
  ctx.strokeStyle = '#d0d5dd';
  ctx.beginPath();
  ctx.moveTo(0, plotTop + plotHeight + 0.5);
  ctx.lineTo(width, plotTop + plotHeight + 0.5);
  ctx.stroke();
}

function stateAtX(x, width) {
  const states = view.timeline ? view.timeline.states : [];
  const c = Math.min(states.length - 1, Math.max(0, Math.floor((x / width) * states.length)));
  return states[c];
}

function bandAt(x, y) {
  for (let i = view.targets.length - 1; i >= 0; i -= 1) {
    const r = view.targets[i];
    if (x >= r.x && x <= r.x + r.w && y >= r.y && y <= r.y + r.h) return r.band;
  }
  return null;
}

// ---- curves -----------------------------------------------------------------------------

async function loadCurves() {
  const canvas = $('curves');
  const width = Math.max(100, Math.floor(canvas.clientWidth));
  view.curves = await getJSON('/api/curves?' + windowParams(width));
  drawCurves();
}

function drawCurves() {
  const c = view.curves;
  const canvas = $('curves');
  const { ctx, width, height } = sizeCanvas(canvas);
  ctx.clearRect(0, 0, width, height);
  const plotHeight = height - AXIS - 4;
  const max = Math.max(1, ...c.reserved, ...c.active, ...c.allocated);
  const colWidth = width / c.allocated.length;
  const line = (values, color, scale) => {
    ctx.strokeStyle = color;
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    values.forEach((v, i) => {
      const x = i * colWidth + colWidth / 2;
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
  drawAxis(ctx, width, height, max, 4, plotHeight);
}

// ---- allocator state --------------------------------------------------------------------

const STATE_COLORS = ['#3b82f6', '#f59e0b', '#e5e7eb'];
const ROW = 14;
const MAX_ROWS = 400;

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
}

function drawState() {
  const s = view.state;
  const ev = s.event ? `${s.event.action} ${fmtBytes(s.event.size)} at ${s.event.addr} (${s.event.site})` : 'before the first event';
  $('state-summary').textContent = `after event ${s.index}: ${ev}. allocated ${fmtBytes(s.allocated_bytes)}, ` +
    `active ${fmtBytes(s.active_bytes)}, reserved ${fmtBytes(s.reserved_bytes)} in ${s.segments.length} segments` +
    (s.unsegmented.length ? `, ${s.unsegmented.length} blocks in no known segment` : '') +
    (s.truncated ? ' (more segments left out)' : '');
  const rows = s.segments.map((seg) => ({ label: `${seg.address} ${seg.pool}${seg.expandable ? ' expandable' : ''} s${seg.stream}`, size: seg.size, blocks: seg.blocks }));
  if (s.unsegmented.length) {
    const last = s.unsegmented[s.unsegmented.length - 1];
    rows.push({ label: 'no segment', size: last[0] + last[1], blocks: s.unsegmented });
  }
  const shown = rows.slice(0, MAX_ROWS);
  const canvas = $('segments');
  canvas.height = Math.max(40, shown.length * ROW + 4) * (canvas._ratio || 1);
  const { ctx, width, height } = sizeCanvas(canvas);
  ctx.clearRect(0, 0, width, height);
  const labelWidth = 190;
  const barWidth = width - labelWidth - 4;
  const largest = Math.max(1, ...shown.map((r) => r.size));
  view.blockTargets = [];
  ctx.font = '10px ui-monospace, monospace';
  ctx.textBaseline = 'middle';
  shown.forEach((row, i) => {
    const y = 2 + i * ROW;
    ctx.fillStyle = '#667085';
    ctx.fillText(row.label, 2, y + ROW / 2, labelWidth - 6);
    const scale = barWidth * Math.max(row.size / largest, 0.002) / Math.max(1, row.size);
    for (const block of row.blocks) {
      const [offset, size, requested, state, context] = block;
      const x = labelWidth + offset * scale;
      const w = Math.max(1, size * scale);
      ctx.fillStyle = STATE_COLORS[state] || '#999';
      ctx.fillRect(x, y + 1, w, ROW - 3);
      view.blockTargets.push({ x, y, w, h: ROW, size, requested, state, context });
    }
  });
}

function blockAt(x, y) {
  return view.blockTargets.find((b) => x >= b.x && x <= b.x + b.w && y >= b.y && y <= b.y + b.h) || null;
}

// ---- context pane -----------------------------------------------------------------------

function showContext(title, facts, context) {
  const body = $('context-body');
  body.replaceChildren();
  body.append(el('h3', title));
  const dl = el('dl');
  for (const [k, v] of facts) { dl.append(el('dt', k), el('dd', v)); }
  body.append(dl);
  body.append(el('div', 'site: ' + context.site));
  body.append(el('div', context.tags.length ? 'tags: ' + context.tags.join(' / ') : 'no tags', 'tags'));
  if (context.frames.length) {
    const ol = el('ol');
    for (const [name, file, line] of context.frames) {
      ol.append(el('li', file ? `${name}  ${file}:${line}` : name));
    }
    body.append(el('div', 'stack, innermost first:'), ol);
  } else {
    body.append(el('div', 'no stack recorded'));
  }
}

async function showAllocation(id) {
  const a = await getJSON(`/api/allocation?device=${view.device}&id=${id}`);
  const end = a.end === null ? 'alive at the end' : `event ${a.end} (${fmtTime(a.end_us)})`;
  showContext(`allocation ${a.id}`, [
    ['size', `${fmtBytes(a.size)} (asked ${fmtBytes(a.requested)})`], ['address', a.addr],
    ['stream', String(a.stream)], ['from', `event ${a.start} (${fmtTime(a.start_us)})`], ['until', end],
  ], a.context);
}

async function showBlock(block) {
  const context = await getJSON(`/api/context?id=${block.context}`);
  showContext('block', [
    ['size', fmtBytes(block.size)], ['requested', fmtBytes(block.requested)],
    ['state', ['allocated', 'pending free', 'free'][block.state]],
  ], context);
}

// ---- tables -----------------------------------------------------------------------------

function row(cells, header) {
  const tr = el('tr');
  for (const [text, num] of cells) tr.append(el(header ? 'th' : 'td', text, num ? 'num' : ''));
  return tr;
}

async function loadTables() {
  const frames = window.memtraceTree ? window.memtraceTree.param() : '';
  view.leaks = await getJSON(`/api/leaks?device=${view.device}${frames}`);
  view.breakdown = await getJSON(`/api/breakdown?device=${view.device}${frames}`);
  drawTables();
}

// Whether a table row's site passes the search box (the same text search as the bands'
// tags and stacks, on the site's name).
function siteMatches(site) {
  const q = $('search').value.trim().toLowerCase();
  return !q || site.toLowerCase().includes(q);
}

function drawTables() {
  const leaks = view.leaks;
  const b = view.breakdown;
  if (!leaks || !b) return;
  const body = $('leaks').tBodies[0];
  body.replaceChildren();
  const group = (title) => { const tr = el('tr', undefined, 'group'); const th = el('th', title); th.colSpan = 3; tr.append(th); body.append(tr); };
  group('alive at the end of the trace, allocated during it');
  body.append(row([['site'], ['bytes', true], ['blocks', true]], true));
  const alive = leaks.alive_at_end.filter((s) => siteMatches(s.label));
  for (const s of alive.slice(0, 200)) body.append(row([[s.label], [fmtBytes(s.bytes), true], [String(s.blocks), true]]));
  if (!alive.length) body.append(row([['none']]));
  group(`growing across steps (${leaks.steps.length} steps)`);
  body.append(row([['site'], ['growth', true], ['per step', true]], true));
  const growing = leaks.growing.filter((g) => siteMatches(g.label));
  for (const g of growing.slice(0, 200)) {
    body.append(row([[g.label], [fmtBytes(g.growth_bytes), true], [g.bytes_per_step.map(fmtBytes).join(' → '), true]]));
  }
  if (!growing.length) body.append(row([['none']]));

  const bb = $('breakdown').tBodies[0];
  bb.replaceChildren();
  const caption = el('tr', undefined, 'group');
  const th = el('th', `event ${b.index}: ${fmtBytes(b.allocated_bytes)} allocated`);
  th.colSpan = 4; caption.append(th); bb.append(caption);
  bb.append(row([['site'], ['bytes', true], ['share', true], ['blocks', true]], true));
  for (const s of b.sites.filter((site) => siteMatches(site.label))) {
    const share = b.allocated_bytes ? ((100 * s.bytes) / b.allocated_bytes).toFixed(1) + '%' : '';
    bb.append(row([[s.label], [fmtBytes(s.bytes), true], [share, true], [String(s.blocks), true]]));
  }
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
        await Promise.all([loadTimeline(), loadCurves()]);
      } catch (e) {
        $('status').textContent = 'error: ' + e.message;
      }
    } while (pending.again);
    view.pending = null;
    view.loads += 1;
  })();
  return pending.done;
}

function zoom(canvas, clientX, factor) {
  const rect = canvas.getBoundingClientRect();
  const at = view.from + ((clientX - rect.left) / rect.width) * (view.to - view.from);
  const [lo, hi] = fullWindow();
  const span = Math.min(hi - lo, Math.max(8, (view.to - view.from) * factor));
  view.from = Math.max(lo, at - (at - view.from) * (span / (view.to - view.from)));
  view.to = Math.min(hi, view.from + span);
  view.from = Math.max(lo, view.to - span);
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

function setupTooltip() {
  const canvas = $('timeline');
  const tip = $('tooltip');
  canvas.addEventListener('mousemove', (e) => {
    const rect = canvas.getBoundingClientRect();
    const band = bandAt(e.clientX - rect.left, e.clientY - rect.top);
    if (!band) { tip.hidden = true; return; }
    tip.textContent = `${fmtBytes(band.size)}  ${band.site}\nstream ${band.stream}, events ${band.start}–${band.end}\nclick for its context`;
    tip.style.left = e.clientX + 12 + 'px';
    tip.style.top = e.clientY + 12 + 'px';
    tip.hidden = false;
  });
  canvas.addEventListener('mouseleave', () => { tip.hidden = true; });
}

function debounce(fn, ms) {
  let timer = null;
  return () => { clearTimeout(timer); timer = setTimeout(fn, ms); };
}

async function selectDevice(device) {
  view.device = device;
  [view.from, view.to] = fullWindow();
  const streams = $('stream');
  streams.replaceChildren(el('option', 'all streams'));
  streams.firstChild.value = '';
  for (const s of deviceMeta().streams) { const o = el('option', 'stream ' + s); o.value = String(s); streams.append(o); }
  $('state-index').max = String(deviceMeta().events);
  await Promise.all([refresh(), loadState(null), loadTables()]);
}

async function main() {
  view.meta = await getJSON('/api/meta');
  $('file').textContent = `${view.meta.file} (${view.meta.format})`;
  if (!view.meta.devices.length) { $('status').textContent = 'this trace has no devices'; return; }
  for (const d of view.meta.devices) { const o = el('option', `${d.device} (${d.events} events)`); o.value = String(d.device); $('device').append(o); }
  $('device').addEventListener('change', () => selectDevice(Number($('device').value)));
  $('axis').addEventListener('change', () => { view.axis = $('axis').value; [view.from, view.to] = fullWindow(); refresh(); });
  $('reset').addEventListener('click', () => { [view.from, view.to] = fullWindow(); refresh(); });
  const refilter = debounce(refresh, 200);
  for (const id of ['search', 'min-size', 'max-size']) $(id).addEventListener('input', refilter);
  $('search').addEventListener('input', drawTables);
  $('stream').addEventListener('change', refresh);
  $('state-index').addEventListener('change', () => loadState(Number($('state-index').value)));
  $('state-peak').addEventListener('click', () => loadState(null));
  attachPanZoom($('timeline'), (x, y, width) => {
    const band = bandAt(x, y);
    if (band) showAllocation(band.id); else loadState(stateAtX(x, width));
  });
  attachPanZoom($('curves'), (x, y, width) => {
    const states = view.curves.states;
    loadState(states[Math.min(states.length - 1, Math.max(0, Math.floor((x / width) * states.length)))]);
  });
  $('segments').addEventListener('click', (e) => {
    const rect = $('segments').getBoundingClientRect();
    const block = blockAt(e.clientX - rect.left, e.clientY - rect.top);
    if (block) showBlock(block);
  });
  setupTooltip();
  window.addEventListener('resize', debounce(() => { refresh(); if (view.state) drawState(); }, 150));
  await selectDevice(view.meta.devices[0].device);
  document.body.dataset.ready = '1';
}

// For automation and the browser test: where each drawn band is, in CSS pixels of the
// timeline canvas.
window.memtrace = {
  view,
  bandRects: () => view.targets.map((r) => ({ id: r.band.id, site: r.band.site, x: r.x, y: r.y, w: r.w, h: r.h })),
};

main().catch((e) => { $('status').textContent = 'error: ' + e.message; $('status').className = 'error'; });
