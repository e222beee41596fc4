// memtrace's page of several files side by side (compare.html): the figures come whole from
// /api/compare, each file's small timeline from /api/curves on one shared scale. Text from the
// traces is only ever set with textContent, never parsed as HTML.
'use strict';

const $ = (id) => document.getElementById(id);
const page = { comparison: null, plots: [] };
// What the page drew, for the browser test: per file, the columns asked for and the highest
// values plotted.
window.compare = page;

const KIB = 1024;
const MIB = 1024 * KIB;
const GIB = 1024 * MIB;

// Bytes as memtrace's text reports write them (PyTorch's units): 512 bytes, 2.00 KiB, 1.50 GiB.
function fmtBytes(n) {
  if (n <= KIB) return `${n} bytes`;
  if (n <= MIB) return `${(n / KIB).toFixed(2)} KiB`;
  if (n <= GIB) return `${(n / MIB).toFixed(2)} MiB`;
  return `${(n / GIB).toFixed(2)} GiB`;
}

function fmtSigned(change) {
  if (change === 0) return '0';
  return (change > 0 ? '+' : '-') + fmtBytes(Math.abs(change));
}

// Microseconds in the largest unit that keeps them at 1 or more.
function fmtDuration(us) {
  if (us >= 1e6) return `${(us / 1e6).toFixed(3)} s`;
  if (us >= 1e3) return `${(us / 1e3).toFixed(3)} ms`;
  return `${Math.round(us)} µs`;
}

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = text;
  if (cls) e.className = cls;
  return e;
}

// A row of `cells` (text or elements); `numeric`: the indices of right-aligned header cells.
function row(cells, header, numeric = []) {
  const tr = el('tr');
  cells.forEach((c, i) => {
    if (c instanceof Node) tr.append(c);
    else tr.append(el(header ? 'th' : 'td', c, numeric.includes(i) ? 'num' : undefined));
  });
  return tr;
}

function num(text, value) {
  const td = el('td', text, 'num');
  if (value !== undefined) td.dataset.value = String(value);
  return td;
}

async function getJSON(path) {
  const response = await fetch(path);
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

function labelOf(index) {
  return page.comparison.files[index].label;
}

function timed() {
  return page.comparison.scale.axis === 'time';
}

// A peak's cell: the bytes, then what reached it and when.
function peakCell(peak) {
  const td = el('td', fmtBytes(peak.bytes), 'num');
  td.dataset.bytes = String(peak.bytes);
  td.dataset.index = String(peak.index);
  let at = peak.after_event === null ? 'before the first event' : `after event ${peak.after_event}`;
  if (peak.event) at += ` (${peak.event.action} ${fmtBytes(peak.event.size)}, ${peak.event.site})`;
  if (timed() && peak.index > 0) at += `, ${fmtDuration(peak.after_start_us)} in`;
  td.append(el('span', at, 'at'));
  return td;
}

function drawImbalance(c) {
  if (!c.imbalance) return;
  $('imbalance-box').hidden = false;
  $('imbalance-title').textContent = c.ranks ? 'Imbalance across ranks' : 'Spread across files';
  const body = $('imbalance').tBodies[0];
  body.append(row(['peak', 'highest', 'lowest', 'mean', 'max / min', 'max − mean', 'outlier'], true, [1, 2, 3, 4, 5]));
  for (const [name, s] of [['allocated', c.imbalance.allocated], ['reserved', c.imbalance.reserved]]) {
    const tr = row([el('td', name, 'label')]);
    tr.dataset.peak = name;
    tr.append(num(`${fmtBytes(s.max)} (${labelOf(s.max_file)})`, s.max));
    tr.append(num(`${fmtBytes(s.min)} (${labelOf(s.min_file)})`, s.min));
    tr.append(num(fmtBytes(Math.round(s.mean)), s.mean));
    tr.append(num(s.max_over_min === null ? 'n/a (lowest is 0)' : `${s.max_over_min.toFixed(3)}×`,
      s.max_over_min === null ? '' : s.max_over_min));
    tr.append(num(fmtBytes(Math.round(s.max_minus_mean)), s.max_minus_mean));
    const outlier = el('td', labelOf(s.outlier), 'outlier');
    outlier.dataset.value = String(s.outlier);
    tr.append(outlier);
    body.append(tr);
  }
}

// A link to the full single-file viewer of file `f` (index.html reads `file=` from its address).
function viewerLink(f) {
  const a = el('a', f.label, 'viewer');
  a.href = `/index.html?file=${f.file}`;
  a.title = `open ${f.label} in the full viewer`;
  return a;
}

function drawFiles(c) {
  const body = $('files').tBodies[0];
  body.append(row(['file', 'path', 'device', 'events', 'peak allocated', 'peak reserved',
    'peak requested', 'out of memory'], true, [3, 4, 5, 6, 7]));
  const outlier = c.imbalance ? c.imbalance.allocated.outlier : -1;
  for (const f of c.files) {
    const tr = el('tr');
    tr.dataset.file = String(f.file);
    if (f.file === outlier) tr.className = 'outlier';
    const label = el('td', undefined, 'label');
    label.append(viewerLink(f));
    tr.append(label, el('td', `${f.path} (${f.format})`, 'path'));
    const others = f.devices.length > 1 ? ` of ${f.devices.map((d) => d.device).join(', ')}` : '';
    tr.append(el('td', `${f.device}${others}`), num(f.events.toLocaleString('en-US'), f.events));
    tr.append(peakCell(f.peak_allocated), peakCell(f.peak_reserved), peakCell(f.peak_requested));
    // Other devices that ran out of memory are named beside the compared device's count.
    const elsewhere = f.out_of_memory_elsewhere.map((d) => `device ${d.device}: ${d.events}`);
    const ooms = num(elsewhere.length ? `${f.out_of_memory} (${elsewhere.join(', ')})` : String(f.out_of_memory), f.out_of_memory);
    tr.append(ooms);
    body.append(tr);
  }
}

function drawCards(c) {
  const cards = $('cards');
  const extent = c.scale.extent;
  $('scale-note').textContent = timed()
    ? `x: time from each file's first event, 0 to ${fmtDuration(extent - 1)}; y: 0 to ${fmtBytes(c.scale.bytes)} (the highest reserved peak)`
    : `x: events from each file's first (some file has no times), 0 to ${extent - 1}; y: 0 to ${fmtBytes(c.scale.bytes)} (the highest reserved peak)`;
  for (const f of c.files) {
    const card = el('div', undefined, 'card');
    card.dataset.file = String(f.file);
    const title = el('h3');
    title.append(viewerLink(f), el('span', f.path, 'path'));
    const span = timed() ? `over ${fmtDuration(f.span_us)}` : (f.span_us ? '' : 'no times recorded');
    const figures = el('div', `device ${f.device} · ${f.events.toLocaleString('en-US')} events ${span} · ` +
      `peak ${fmtBytes(f.peak_allocated.bytes)} allocated, ${fmtBytes(f.peak_reserved.bytes)} reserved`, 'figures');
    const canvas = el('canvas');
    canvas.height = 130;
    const sites = el('table');
    const sitesBody = el('tbody');
    sitesBody.append(row(['sites at the allocated peak', 'allocated', 'blocks'], true, [1, 2]));
    for (const s of f.top_sites.slice(0, 5)) {
      const tr = row([el('td', s.label || s.site, 'site')]);
      tr.append(num(fmtBytes(s.bytes), s.bytes), num(String(s.blocks), s.blocks));
      sitesBody.append(tr);
    }
    if (f.top_sites.length === 0) sitesBody.append(row(['nothing allocated at the peak']));
    sites.append(sitesBody);
    card.append(title, figures, canvas, sites);
    cards.append(card);
  }
}

const MARGIN = { left: 62, right: 8, top: 8, bottom: 18 };

async function drawTimeline(f) {
  const c = page.comparison;
  const canvas = document.querySelector(`.card[data-file="${f.file}"] canvas`);
  const ratio = window.devicePixelRatio || 1;
  const cssWidth = Math.max(200, Math.floor(canvas.clientWidth));
  const cssHeight = 130;
  canvas.width = cssWidth * ratio;
  canvas.height = cssHeight * ratio;
  const plotWidth = cssWidth - MARGIN.left - MARGIN.right;
  const plotHeight = cssHeight - MARGIN.top - MARGIN.bottom;
  // This file's share of the shared x axis, in columns of one CSS pixel.
  const columns = Math.max(1, Math.round(plotWidth * f.extent / c.scale.extent));
  const from = timed() ? f.first_us : 0;
  const curves = await getJSON(`/api/curves?file=${f.file}&device=${f.device}&axis=${c.scale.axis}` +
    `&from=${from}&to=${from + f.extent}&width=${columns}`);
  const ctx = canvas.getContext('2d');
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, cssWidth, cssHeight);
  const top = c.scale.bytes || 1;
  const y = (v) => MARGIN.top + plotHeight - (v / top) * plotHeight;
  const x = (i) => MARGIN.left + i * (columns / curves.allocated.length);
  ctx.fillStyle = 'rgba(37, 99, 235, 0.35)';
  ctx.strokeStyle = '#2563eb';
  ctx.beginPath();
  ctx.moveTo(x(0), y(0));
  curves.allocated.forEach((v, i) => { ctx.lineTo(x(i), y(v)); ctx.lineTo(x(i + 1), y(v)); });
  ctx.lineTo(x(curves.allocated.length), y(0));
  ctx.closePath();
  ctx.fill();
  ctx.strokeStyle = '#ea580c';
  ctx.lineWidth = 1.5;
  ctx.beginPath();
  curves.reserved.forEach((v, i) => {
    if (i === 0) ctx.moveTo(x(0), y(v)); else ctx.lineTo(x(i), y(v));
    ctx.lineTo(x(i + 1), y(v));
  });
  ctx.stroke();
  // Axes: bytes on the left, the shared x range below.
  ctx.strokeStyle = '#98a2b3';
  ctx.lineWidth = 1;
  ctx.beginPath();
  ctx.moveTo(MARGIN.left, MARGIN.top);
  ctx.lineTo(MARGIN.left, MARGIN.top + plotHeight);
  ctx.lineTo(MARGIN.left + plotWidth, MARGIN.top + plotHeight);
  ctx.stroke();
  ctx.fillStyle = '#667085';
  ctx.font = '10px system-ui, sans-serif';
  ctx.textAlign = 'right';
  ctx.textBaseline = 'top';
  ctx.fillText(fmtBytes(c.scale.bytes), MARGIN.left - 4, MARGIN.top);
  ctx.textBaseline = 'bottom';
  ctx.fillText('0', MARGIN.left - 4, MARGIN.top + plotHeight);
  ctx.textBaseline = 'top';
  const end = timed() ? fmtDuration(c.scale.extent - 1) : `event ${c.scale.extent - 1}`;
  ctx.fillText(end, MARGIN.left + plotWidth, MARGIN.top + plotHeight + 3);
  ctx.textAlign = 'left';
  ctx.fillText(timed() ? '0 µs' : 'event 0', MARGIN.left, MARGIN.top + plotHeight + 3);
  page.plots[f.file] = {
    columns,
    plotWidth,
    allocated: Math.max(...curves.allocated),
    reserved: Math.max(...curves.reserved),
    allocatedTopPx: y(Math.max(...curves.allocated)),
  };
}

function drawSites(c) {
  const s = c.sites;
  if (!s) return;
  $('sites-box').hidden = false;
  const a = labelOf(s.a);
  const b = labelOf(s.b);
  $('sites-title').textContent = `Sites: ${b} against ${a}`;
  const body = $('sites').tBodies[0];
  body.append(row(['site', `at ${a}'s peak`, `at ${b}'s peak`, 'change', `${a} at the end`,
    `${b} at the end`, 'change'], true, [1, 2, 3, 4, 5, 6]));
  for (const d of s.changed) {
    const tr = row([el('td', d.site, 'site')]);
    tr.dataset.site = d.site;
    const change = (x, y) => {
      const td = num(fmtSigned(y - x), y - x);
      if (y !== x) td.classList.add(y > x ? 'up' : 'down');
      return td;
    };
    tr.append(num(fmtBytes(d.peak_a), d.peak_a), num(fmtBytes(d.peak_b), d.peak_b), change(d.peak_a, d.peak_b));
    tr.append(num(fmtBytes(d.end_a), d.end_a), num(fmtBytes(d.end_b), d.end_b), change(d.end_a, d.end_b));
    body.append(tr);
  }
  const shown = s.changed.length < s.changed_count ? ` (the ${s.changed.length} largest changes shown)` : '';
  $('sites-note').textContent = `${s.changed_count} sites changed${shown}, ${s.unchanged_count} the same. ` +
    `Live allocated bytes of each site at each file's own allocated peak (${fmtBytes(s.peak_a)} and ` +
    `${fmtBytes(s.peak_b)}) and at its end, as memtrace diff reports them.`;
}

async function drawTimelines() {
  await Promise.all(page.comparison.files.map(drawTimeline));
}

async function main() {
  try {
    const c = await getJSON('/api/compare');
    page.comparison = c;
    const n = c.files.length;
    $('title').textContent = c.ranks ? `${n} ranks side by side` : `${n} files side by side`;
    document.title = `memtrace: ${$('title').textContent}`;
    drawImbalance(c);
    drawFiles(c);
    drawCards(c);
    drawSites(c);
    await drawTimelines();
    let resize = null;
    window.addEventListener('resize', () => {
      clearTimeout(resize);
      resize = setTimeout(() => { drawTimelines().catch(showError); }, 150);
    });
    document.body.dataset.ready = '1';
  } catch (e) {
    showError(e);
  }
}

function showError(e) {
  const status = $('status');
  status.textContent = String(e.message || e);
  status.className = 'error';
}

main();
