// memtrace's viewer: drawing on the canvases. Scales, ticks, axes, the stacked bands of a
// timeline answer placed by value (so an answer of another window is drawn stretched or cut
// to the view's), the out-of-memory markers and annotation strip, and the segment map of one
// state. Loaded before app.js, which holds the view these read and calls them.
'use strict';

function fmtBytes(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  let v = Number(n);
  while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
  return (i === 0 ? String(v) : v.toFixed(v < 10 ? 2 : 1)) + ' ' + units[i];
}

function fmtTime(us) {
  if (us >= 1e6) return (us / 1e6).toFixed(3).replace(/\.?0+$/, '') + ' s';
  if (us >= 1e3) return (us / 1e3).toFixed(2).replace(/\.?0+$/, '') + ' ms';
  return Math.round(us) + ' µs';
}

// A round step near span / count: 1, 2 or 5 times a power of ten.
function niceStep(span, count) {
  const raw = Math.max(span, 1e-9) / Math.max(1, count);
  const power = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 5]) if (m * power >= raw) return m * power;
  return 10 * power;
}

// Byte ticks from 0 to max: a round number of the largest binary unit below max.
function byteTicks(max, count) {
  let unit = 1;
  while (unit * 1024 <= max) unit *= 1024;
  const step = Math.max(unit === 1 ? 1 : 0, niceStep(max / unit, count)) * unit;
  const ticks = [];
  for (let v = 0; v <= max * 1.0001; v += step) ticks.push(v);
  return ticks;
}

// Ticks of the x axis in the window [view.from, view.to): whole events or round times.
function xTicks(count) {
  const span = view.to - view.from;
  const step = view.axis === 'event' ? Math.max(1, Math.round(niceStep(span, count))) : niceStep(span, count);
  const ticks = [];
  for (let v = Math.ceil(view.from / step) * step; v < view.to; v += step) ticks.push(v);
  return ticks;
}

function xLabel(value) {
  return view.axis === 'event' ? String(Math.round(value)) : fmtTime(value);
}

function colorOf(text) {
  let h = 0;
  for (let i = 0; i < text.length; i += 1) h = (h * 31 + text.charCodeAt(i)) >>> 0;
  return `hsl(${h % 360}, 62%, ${52 + (h >> 9) % 16}%)`;
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

// Where an answer's column `c` (fractional: its middle is c + 0.5) starts on a canvas of
// `width` showing the view's window; the answer may be of another window.
function columnX(answer, columns, c, width) {
  return xOfValue(answer.from + (c / columns) * (answer.to - answer.from), width);
}

// The answer's column under x, as a number past either end when x is outside the answer's
// window.
function columnUnder(answer, columns, x, width) {
  const value = view.from + (x / width) * (view.to - view.from);
  return Math.floor(((value - answer.from) / (answer.to - answer.from)) * columns);
}

// The answer's column under x, or -1 when x is outside the answer's window.
function columnAt(answer, columns, x, width) {
  const c = columnUnder(answer, columns, x, width);
  return c >= 0 && c < columns ? c : -1;
}

const STRIP = 16; // annotation strip height, CSS px
const AXIS = 18;  // tick labels height

function xOfValue(value, width) {
  return ((value - view.from) / (view.to - view.from)) * width;
}

// Draws a stacked band timeline (allocations or segments) on `canvas`; returns the hit
// rectangles of the bands and the y scale.
function drawBands(canvas, t, colorKey, outline) {
  const { ctx, width, height } = sizeCanvas(canvas);
  ctx.clearRect(0, 0, width, height);
  const plotTop = STRIP + 2;
  const plotHeight = height - plotTop - AXIS;
  const columns = t.total.length;
  const x = (c) => columnX(t, columns, c, width);
  const maxTotal = Math.max(1, ...t.total);
  const scale = plotHeight / maxTotal;
  const y = (bytes) => plotTop + plotHeight - bytes * scale;
  drawGrid(ctx, width, maxTotal, plotTop, plotHeight);
  const targets = [];
  for (const band of t.bands) {
    ctx.fillStyle = colorOf(colorKey(band));
    for (const [c0, c1, below] of band.runs) {
      const rect = {
        x: x(c0), w: Math.max(1, x(c1) - x(c0)),
        y: y(below + band.size), h: Math.max(1, band.size * scale), band,
      };
      ctx.fillRect(rect.x, rect.y, rect.w, rect.h);
      if (outline && rect.h >= 3) {
        ctx.strokeStyle = '#ffffff';
        ctx.strokeRect(rect.x + 0.5, rect.y + 0.5, rect.w - 1, rect.h - 1);
      }
      targets.push(rect);
    }
  }
  ctx.fillStyle = 'rgba(120, 128, 140, 0.55)';
  for (let c = 0; c < columns; c += 1) {
    if (t.other[c] > 0) {
      const top = y(t.total[c]);
      ctx.fillRect(x(c), top, x(c + 1) - x(c) + 0.5, y(t.total[c] - t.other[c]) - top);
    }
  }
  drawAnnotations(ctx, width);
  drawOoms(ctx, width, plotTop, plotTop + plotHeight);
  drawAxis(ctx, width, height, maxTotal, plotTop, plotHeight);
  return {
    targets, y, x, column: (px) => columnAt(t, columns, px, width),
  };
}

function drawOoms(ctx, width, top, bottom) {
  view.oomTargets = [];
  for (const oom of view.ooms) {
    const value = view.axis === 'event' ? oom.index : oom.time_us;
    if (value < view.from || value >= view.to) continue;
    const x = Math.round(xOfValue(value, width)) + 0.5;
    ctx.strokeStyle = '#dc2626';
    ctx.lineWidth = 2;
    ctx.beginPath(); ctx.moveTo(x, top); ctx.lineTo(x, bottom); ctx.stroke();
    ctx.lineWidth = 1;
    ctx.fillStyle = '#dc2626';
    ctx.beginPath(); ctx.moveTo(x - 6, top); ctx.lineTo(x + 6, top); ctx.lineTo(x, top + 9); ctx.closePath(); ctx.fill();
    ctx.font = 'bold 10px system-ui, sans-serif';
    ctx.textBaseline = 'top';
    ctx.fillText('OOM', Math.min(width - 26, x + 7), top);
    view.oomTargets.push({ x, oom });
  }
}

function oomAt(x) {
  return view.oomTargets.find((o) => Math.abs(o.x - x) <= 5) || null;
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

// Horizontal grid lines at the byte ticks (drawn first, under the data).
function drawGrid(ctx, width, maxBytes, plotTop, plotHeight) {
  ctx.strokeStyle = '#eef0f3';
  ctx.lineWidth = 1;
  for (const v of byteTicks(maxBytes, 4)) {
    const y = Math.round(plotTop + plotHeight - (v / maxBytes) * plotHeight) + 0.5;
    ctx.beginPath(); ctx.moveTo(0, y); ctx.lineTo(width, y); ctx.stroke();
  }
}

// Both axes: bytes on the left (round binary units), events or time below, with the unit
// named at the right end; `right` adds a 0-100 % scale on the right.
function drawAxis(ctx, width, height, maxBytes, plotTop, plotHeight, right) {
  ctx.fillStyle = '#667085';
  ctx.strokeStyle = '#98a2b3';
  ctx.font = '10px system-ui, sans-serif';
  ctx.textBaseline = 'top';
  const base = plotTop + plotHeight + 0.5;
  ctx.beginPath(); ctx.moveTo(0, base); ctx.lineTo(width, base); ctx.stroke();
  const unit = view.axis === 'event' ? 'event index' : 'time since trace start';
  const unitWidth = ctx.measureText(unit).width + 6;
  ctx.fillText(unit, width - unitWidth, height - AXIS + 5);
  for (const v of xTicks(Math.max(2, Math.floor(width / 110)))) {
    const x = Math.round(xOfValue(v, width)) + 0.5;
    ctx.beginPath(); ctx.moveTo(x, base); ctx.lineTo(x, base + 4); ctx.stroke();
    const label = xLabel(v);
    const w = ctx.measureText(label).width;
    const lx = Math.max(0, Math.min(width - w, x - w / 2));
    if (lx + w < width - unitWidth - 4) ctx.fillText(label, lx, height - AXIS + 5);
  }
  ctx.textBaseline = 'middle';
  // Labels on a light box: they sit over the data.
  const label = (text, x, y) => {
    const w = ctx.measureText(text).width;
    ctx.fillStyle = 'rgba(255, 255, 255, 0.8)';
    ctx.fillRect(x - 2, y - 6, w + 4, 12);
    ctx.fillStyle = '#475467';
    ctx.fillText(text, x, y);
  };
  for (const v of byteTicks(maxBytes, 4)) {
    if (v === 0) continue;
    const y = plotTop + plotHeight - (v / maxBytes) * plotHeight;
    ctx.beginPath(); ctx.moveTo(0, y + 0.5); ctx.lineTo(4, y + 0.5); ctx.stroke();
    label(fmtBytes(v), 6, Math.max(plotTop + 6, y));
  }
  if (right) {
    for (let p = 0; p <= 100; p += 25) {
      const y = plotTop + plotHeight - (p / 100) * plotHeight;
      const text = p + ' %';
      ctx.beginPath(); ctx.moveTo(width - 4, y + 0.5); ctx.lineTo(width, y + 0.5); ctx.stroke();
      label(text, width - 6 - ctx.measureText(text).width, Math.max(plotTop + 6, Math.min(base - 6, y)));
    }
  }
}

// The state the timeline's column under x shows (the nearest column's outside its window).
function stateAtX(x, width) {
  const t = view.timeline;
  if (!t) return undefined;
  const columns = t.states.length;
  const c = columnUnder(t, columns, x, width);
  return t.states[Math.min(columns - 1, Math.max(0, c))];
}

function bandAt(x, y) {
  for (let i = view.targets.length - 1; i >= 0; i -= 1) {
    const r = view.targets[i];
    if (x >= r.x && x <= r.x + r.w && y >= r.y && y <= r.y + r.h) return r.band;
  }
  return null;
}

const STATE_COLORS = ['#3b82f6', '#f59e0b', '#e5e7eb'];
const ROW = 14;
const MAX_ROWS = 1000;

function drawState() {
  const s = view.state;
  // An out-of-memory event's address is the device's free memory, not an address.
  const where = (e) => (e.action === 'oom'
    ? `requested with ${fmtBytes(Number(BigInt(e.addr)))} free on the device` : `at ${e.addr}`);
  const ev = s.event ? `${s.event.action} ${fmtBytes(s.event.size)} ${where(s.event)} (${s.event.site})` : 'before the first event';
  $('state-summary').textContent = `${s.label}: ${ev}. allocated ${fmtBytes(s.allocated_bytes)}, ` +
    `active ${fmtBytes(s.active_bytes)}, reserved ${fmtBytes(s.reserved_bytes)} in ${s.segments.length} segments` +
    (s.unsegmented.length ? `, ${s.unsegmented.length} blocks in no known segment` : '');
  const rows = s.segments.map((seg) => ({ label: `${seg.address} ${seg.pool}${seg.expandable ? ' expandable' : ''} s${seg.stream}`, size: seg.size, blocks: seg.blocks }));
  if (s.unsegmented.length) {
    const last = s.unsegmented[s.unsegmented.length - 1];
    rows.push({ label: 'no segment', size: last[0] + last[1], blocks: s.unsegmented });
  }
  const shown = rows.slice(0, MAX_ROWS);
  const total = s.segments_total + (s.unsegmented.length ? 1 : 0);
  const left = total - shown.length;
  $('segments-note').textContent = left > 0
    ? `${shown.length} of ${total} segments drawn, ${left} more left out (lowest addresses first` +
      (s.truncated ? `; the server sends segments up to 20,000 blocks` : '') + ')'
    : `${total} segments, each a row (scroll inside the box for more)`;
  $('segments').dataset.drawn = String(shown.length);
  $('segments').dataset.total = String(total);
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
