// memtrace's viewer: the panels below the charts. The state history (every event, filtered
// and paged), the out-of-memory list, and the tables (sites, leaks, breakdown). Loaded before
// app.js, which holds the view these read and calls them.
'use strict';

// ---- state history ----------------------------------------------------------------------

async function loadHistory() {
  const params = new URLSearchParams({
    device: String(view.device), offset: String(view.historyOffset), limit: String(HISTORY_PAGE),
  });
  if ($('history-action').value) params.set('action', $('history-action').value);
  const q = $('history-search').value.trim();
  if (q) params.set('q', q);
  view.history = await getJSON('/api/events?' + params);
  drawHistory();
}

function drawHistory() {
  const h = view.history;
  const body = $('history').tBodies[0];
  body.replaceChildren();
  const times = deviceMeta().has_times;
  body.append(row([['event', true], ['action'], ['size', true], ['address'], ['stream', true], ['time', true], ['site']], true));
  for (const e of h.rows) {
    const size = e.action === 'oom' ? `${fmtBytes(e.size)} asked` : fmtBytes(e.size);
    const addr = e.action === 'oom' ? `${fmtBytes(Number(BigInt(e.addr)))} free` : e.addr;
    const tr = row([[e.event === null ? e.label : String(e.event), true], [e.action], [size, true], [addr], [String(e.stream), true],
      [times ? fmtTime(e.time_us) : '–', true], [e.site]]);
    tr.className = 'event' + (e.action === 'oom' ? ' oom' : '');
    tr.dataset.index = String(e.index);
    tr.addEventListener('click', () => selectEvent(e));
    body.append(tr);
  }
  if (!h.rows.length) body.append(row([['no event matches']]));
  const last = h.offset + h.rows.length;
  $('history-status').textContent = h.rows.length
    ? `${h.offset + 1}–${last} of ${h.matched} events${h.matched < h.events ? ` (of ${h.events})` : ''}; click one for the state after it and its stack`
    : `0 of ${h.events} events`;
  $('history-prev').disabled = h.offset === 0;
  $('history-next').disabled = last >= h.matched;
  markHistory();
}

function markHistory() {
  for (const tr of $('history').querySelectorAll('tr.event')) {
    tr.classList.toggle('selected', view.selectedEvent !== null && Number(tr.dataset.index) === view.selectedEvent);
  }
}

async function selectEvent(e) {
  view.selectedEvent = e.index;
  markHistory();
  const context = await getJSON(`/api/context?id=${e.context}`);
  const facts = [['action', e.action], ['size', fmtBytes(e.size)], ['stream', String(e.stream)]];
  if (e.action === 'oom') facts.push(['device free', fmtBytes(Number(BigInt(e.addr)))]);
  else facts.push(['address', e.addr]);
  if (deviceMeta().has_times) facts.push(['time', fmtTime(e.time_us)]);
  showContext(`${e.label}: ${e.action}`, facts, context);
  const k = e.action === 'oom' ? view.ooms.findIndex((o) => o.index === e.index) + 1 : 0;
  const [explained] = await Promise.all([
    k ? getJSON(`/api/explain?device=${view.device}&oom=${k}`) : null, loadState(e.index)]);
  if (explained && view.selectedEvent === e.index) showExplanation(explained);
}

function oomText(o) {
  return `out of memory at ${o.label}: a request of ${fmtBytes(o.size)} on stream ${o.stream} failed\n` +
    `device free: ${fmtBytes(o.device_free)}; allocated ${fmtBytes(o.allocated_bytes)}, reserved ${fmtBytes(o.reserved_bytes)}\n` +
    `site: ${o.site}\nclick for its stack`;
}

async function showOom(o) {
  const context = await getJSON(`/api/context?id=${o.context}`);
  const facts = [['request', fmtBytes(o.size)], ['stream', String(o.stream)], ['device free', fmtBytes(o.device_free)],
    ['allocated', fmtBytes(o.allocated_bytes)], ['reserved', fmtBytes(o.reserved_bytes)]];
  if (deviceMeta().has_times) facts.push(['time', fmtTime(o.time_us)]);
  showContext(`out of memory at ${o.label}`, facts, context);
  view.selectedEvent = o.index;
  const k = view.ooms.indexOf(o) + 1;
  const [explained] = await Promise.all([
    getJSON(`/api/explain?device=${view.device}&oom=${k}`), loadState(o.index)]);
  showExplanation(explained);
}

async function loadOoms() {
  view.ooms = await getJSON(`/api/ooms?device=${view.device}`);
  const n = view.ooms.length;
  // A device without one says which others ran out of memory.
  const others = view.meta.summary.devices
    .filter((d) => d.device !== view.device && d.out_of_memory.length)
    .map((d) => `device ${d.device} (${d.out_of_memory.length})`);
  $('oom-note').textContent = n
    ? `${n} out-of-memory event${n === 1 ? '' : 's'} recorded`
    : others.length
      ? `none on this device; out of memory on ${others.join(', ')}: choose it above`
      : 'no out-of-memory event was recorded';
}

// ---- tables -----------------------------------------------------------------------------

function row(cells, header) {
  const tr = el('tr');
  for (const [text, num] of cells) tr.append(el(header ? 'th' : 'td', text, num ? 'num' : ''));
  return tr;
}

async function loadTables() {
  const frames = window.memtraceTree ? window.memtraceTree.param() : '';
  view.leaks = await getJSON(`/api/leaks?device=${view.device}${frames}${leakStepParam()}`);
  view.breakdown = await getJSON(`/api/breakdown?device=${view.device}${frames}`);
  drawTables();
}

// Whether a table row's site passes the search box (the same text search as the bands'
// tags and stacks, on the site's name).
function siteMatches(site) {
  const q = $('search').value.trim().toLowerCase();
  return !q || site.toLowerCase().includes(q);
}

// The `step` parameter of /api/leaks: the prefix typed in the leak table's step box, none
// (the server's default, `ProfilerStep#`) when it is empty.
function leakStepParam() {
  const box = $('leak-step');
  const prefix = box ? box.value.trim() : '';
  return prefix ? `&step=${encodeURIComponent(prefix)}` : '';
}

function drawTables() {
  const leaks = view.leaks;
  const b = view.breakdown;
  if (!leaks || !b) return;
  const body = $('leaks').tBodies[0];
  body.replaceChildren();
  const group = (title) => { const tr = el('tr', undefined, 'group'); const th = el('th', title); th.colSpan = 3; tr.append(th); body.append(tr); };
  const note = (text) => { const tr = el('tr', undefined, 'note'); const td = el('td', text, 'hint'); td.colSpan = 3; tr.append(td); body.append(tr); };
  // What a step is here, as `memtrace leaks` says it.
  note(`steps: ${leaks.step_rule.text}`);
  const k = leaks.settings.min_growth_steps;
  group(`growing: ${k}+ consecutive growing steps (${leaks.measured_at.length} measurements)`);
  body.append(row([['site'], ['growth per step', true], ['by step', true]], true));
  const growing = leaks.growing.filter((g) => siteMatches(g.label));
  for (const g of growing.slice(0, 200)) {
    body.append(row([[g.label], [`+${fmtBytes(g.growth_bytes_per_step)}, +${g.growth_blocks_per_step} blocks`, true],
      [g.bytes_by_step.map(fmtBytes).join(' → '), true]]));
  }
  if (leaks.measured_at.length <= k) body.append(row([[`cannot tell: ${k} growing steps take ${k + 1} measurements`]]));
  else if (!growing.length) body.append(row([['none']]));
  group('persistent: allocated early and kept unchanged (weights, optimizer state)');
  body.append(row([['site'], ['bytes', true], ['blocks', true]], true));
  const persistent = leaks.persistent.filter((p) => siteMatches(p.label));
  for (const p of persistent.slice(0, 200)) body.append(row([[`${p.label} (since ${p.since})`], [fmtBytes(p.bytes), true], [String(p.blocks), true]]));
  if (!persistent.length) body.append(row([['none']]));
  group('alive at the end of the trace, allocated during it (persistent sites apart)');
  body.append(row([['site'], ['bytes', true], ['blocks', true]], true));
  const alive = leaks.alive_at_end.filter((s) => siteMatches(s.label));
  for (const s of alive.slice(0, 200)) body.append(row([[s.label], [fmtBytes(s.bytes), true], [String(s.blocks), true]]));
  if (!alive.length) body.append(row([['none']]));

  const bb = $('breakdown').tBodies[0];
  bb.replaceChildren();
  const caption = el('tr', undefined, 'group');
  const th = el('th', `${stateLabel(b.index)}: ${fmtBytes(b.allocated_bytes)} allocated`);
  th.colSpan = 4; caption.append(th); bb.append(caption);
  bb.append(row([['site'], ['bytes', true], ['share', true], ['blocks', true]], true));
  for (const s of b.sites.filter((site) => siteMatches(site.label))) {
    const share = b.allocated_bytes ? ((100 * s.bytes) / b.allocated_bytes).toFixed(1) + '%' : '';
    bb.append(row([[s.label], [fmtBytes(s.bytes), true], [share, true], [String(s.blocks), true]]));
  }
}
