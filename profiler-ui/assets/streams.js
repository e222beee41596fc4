// memtrace's viewer: memory by stream (/api/streams, `memtrace streams`). What each stream
// cached over the events (the streams that cached the most, each a line, with all streams',
// the stranded and the waiting bytes), the reserved peak split, the frees that waited for
// other streams, what the stream-ordered policy would have reserved, and a table of the
// streams. Loaded before app.js, which calls loadStreams when a device is picked.
'use strict';

const STREAM_ROWS = 200;

async function loadStreams() {
  const device = view.device;
  $('streams-summary').textContent = 'computing memory by stream…';
  const answer = await getJSON(`/api/streams?device=${device}`);
  if (view.device !== device) return;
  view.streamMemory = answer;
  drawStreams();
}

function streamName(stream) {
  return stream === 0 ? 'stream 0 (default)' : `stream 0x${stream.toString(16)}`;
}

function streamLines(s) {
  const lines = [];
  const p = s.reserved_peak;
  lines.push(`At the reserved peak (${p.at}): ${fmtBytes(p.reserved_bytes)} reserved = ${fmtBytes(p.allocated_bytes)} allocated + ` +
    `${fmtBytes(p.waiting_bytes)} waiting for other streams + ${fmtBytes(p.cached_bytes)} cached, of which ${fmtBytes(p.stranded_bytes)} stranded.`);
  const st = s.stranded;
  lines.push(st.peak
    ? `Stranded: up to ${fmtBytes(st.peak_bytes)} at once (${st.peak.at}) on ${st.streams} stream(s) that had made their last allocation while others still allocated; ` +
      `${fmtBytes(st.left_at_end_bytes)} left cached at the end on streams that stopped early.`
    : 'Stranded: none.');
  const w = s.waiting;
  if (!s.completions) lines.push('Waiting: the trace records no free_completed events.');
  else lines.push(w.peak
    ? `Waiting for other streams (record_stream): ${w.frees} free(s), ${fmtBytes(w.bytes)}; up to ${fmtBytes(w.peak_bytes)} at once (${w.peak.at}); ` +
      `the longest wait ${w.longest_events} events${w.longest_us ? `, ${fmtTime(w.longest_us)}` : ''}.`
    : 'Waiting for other streams (record_stream): none.');
  const o = s.ordered;
  if (o) {
    const saved = o.saved_bytes >= 0 ? `${fmtBytes(o.saved_bytes)} less` : `${fmtBytes(-o.saved_bytes)} more`;
    lines.push(`stream_reuse:ordered: peak reserved ${fmtBytes(o.ordered_peak_reserved_bytes)} instead of ${fmtBytes(o.replayed_peak_reserved_bytes)} ` +
      `(${saved}), replayed on a simulated device; try BLOCKPOOL_ALLOC_CONF=${o.ordered_config}.`);
  } else if (s.ordered_note) {
    lines.push(`stream_reuse:ordered: ${s.ordered_note}.`);
  }
  return lines;
}

function drawStreams() {
  const s = view.streamMemory;
  if (!s) return;
  const summary = $('streams-summary');
  summary.replaceChildren(...streamLines(s).map((line) => el('div', line)));
  drawStreamChart(s.chart);
  const body = $('streams').tBodies[0];
  body.replaceChildren();
  body.append(row([['stream'], ['allocations', true], ['peak reserved', true], ['peak cached', true], ['stranded', true],
    ['waited', true], ['end cached', true], ['last allocation']], true));
  const listed = [...s.streams].sort((a, b) => b.peak_reserved_bytes - a.peak_reserved_bytes || a.stream - b.stream);
  for (const u of listed.slice(0, STREAM_ROWS)) {
    body.append(row([[streamName(u.stream)], [String(u.allocations), true], [fmtBytes(u.peak_reserved_bytes), true],
      [fmtBytes(u.peak_cached_bytes), true], [fmtBytes(u.stranded_bytes), true], [fmtBytes(u.bytes_waited), true],
      [fmtBytes(u.end_cached_bytes), true], [u.last_allocation || 'none in the trace']]));
  }
  if (listed.length > STREAM_ROWS) body.append(row([[`… and ${listed.length - STREAM_ROWS} more streams (memtrace streams --json lists every one)`]]));
}

// The chart over all the device's events (the x axis counts states), whatever the window.
function drawStreamChart(chart) {
  const canvas = $('stream-chart');
  const { ctx, width, height } = sizeCanvas(canvas);
  ctx.clearRect(0, 0, width, height);
  const plotHeight = height - 8;
  const columns = chart.cached.length;
  const max = Math.max(1, ...chart.cached, ...chart.waiting);
  drawGrid(ctx, width, max, 4, plotHeight);
  const line = (values, color, dash) => {
    ctx.strokeStyle = color;
    ctx.lineWidth = 1.5;
    ctx.setLineDash(dash || []);
    ctx.beginPath();
    values.forEach((v, i) => {
      const x = ((i + 0.5) / Math.max(1, columns)) * width;
      const y = 4 + plotHeight - (v / max) * plotHeight;
      if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
    });
    ctx.stroke();
    ctx.setLineDash([]);
  };
  const legend = $('stream-legend');
  legend.replaceChildren();
  const key = (text, color) => { const k = el('span', text, 'key line'); k.style.setProperty('--key', color); legend.append(k); };
  line(chart.cached, '#111827'); key('cached, all streams', '#111827');
  line(chart.stranded, '#dc2626', [4, 3]); key('stranded', '#dc2626');
  line(chart.waiting, '#9333ea', [2, 2]); key('waiting for other streams', '#9333ea');
  for (const s of chart.streams) {
    const color = colorOf(String(s.stream));
    line(s.cached, color);
    key(`cached, ${streamName(s.stream)}`, color);
  }
}
