// Writes a blockpool JSONL trace with a planted leak: four annotated training steps whose
// activations (`forward/attention`, `forward/mlp`) are freed in the backward pass, weights
// allocated once under `init`, and a `leaky_cache` block of 64 MiB per step that is never freed.
// Each step also reserves and releases a 512 MiB workspace segment (for the segment timeline),
// and the last step records one out-of-memory event: a 6 GiB request under `forward/huge` from
// `Model.grow` (model.py:99) that failed with 1.5 GiB free on the device.
// Usage: node gen-trace.mjs OUT.jsonl [STEPS]   (4 steps by default; about 800 events a step)
import { writeFileSync } from 'node:fs';

const out = process.argv[2];
const STEPS = Number(process.argv[3] || 4);
if (!out) { console.error('usage: node gen-trace.mjs OUT.jsonl'); process.exit(2); }

const MiB = 1024 * 1024;
const BASE = 0x7f0000000000;
let SEGMENT = 0; // set once every block has its address: one segment holds them all
const lines = [];
const events = [];
let time = 0;
let next = BASE;
const live = new Map(); // address -> [size, requested, context]

lines.push({ blockpool_trace: 1, created_by: 'memtrace browser test', time_origin_unix_us: 1700000000000000, allocator_config: '' });
const frames = [
  { frame: 1, name: 'Model.forward', file: 'model.py', line: 10 },
  { frame: 2, name: 'Attention.forward', file: 'model.py', line: 42 },
  { frame: 3, name: 'Mlp.forward', file: 'model.py', line: 77 },
  { frame: 4, name: 'Cache.remember', file: 'cache.py', line: 7 },
  { frame: 5, name: 'Model.__init__', file: 'model.py', line: 3 },
  { frame: 6, name: 'Model.grow', file: 'model.py', line: 99 },
];
const WORKSPACE = BASE + 64 * 1024 * MiB; // far above the main segment
lines.push(...frames);
const contexts = new Map();
function context(tags, frameIds) {
  const key = JSON.stringify([tags, frameIds]);
  if (!contexts.has(key)) {
    const id = contexts.size + 1;
    contexts.set(key, id);
    lines.push({ context: id, tags, frames: frameIds });
  }
  return contexts.get(key);
}
function event(name, addr, size, requested, ctx) {
  time += 10;
  events.push({ event: name, device: 0, stream: 0, addr, size, requested, time_us: time, context: ctx });
}
function alloc(size, ctx) {
  const addr = next;
  next += size;
  live.set(addr, [size, size, ctx]);
  event('alloc', addr, size, size, ctx);
  return addr;
}
function free(addr) {
  const [size, , ctx] = live.get(addr);
  live.delete(addr);
  event('free_requested', addr, size, size, ctx);
  event('free_completed', addr, size, size, ctx);
}
function annotate(tags) { event('annotate', 0, 0, 0, context(tags, [])); }

event('segment_alloc', BASE, SEGMENT, 0, 0);
annotate(['init']);
for (let layer = 0; layer < 4; layer += 1) alloc(128 * MiB, context(['init', 'weights'], [5]));
annotate([]);
for (let step = 0; step < STEPS; step += 1) {
  const s = `step${step}`;
  annotate([s]);
  event('segment_alloc', WORKSPACE, 512 * MiB, 0, 0);
  const activations = [];
  for (let layer = 0; layer < 12; layer += 1) {
    activations.push(alloc((96 + 8 * layer) * MiB, context([s, 'forward', 'attention'], [2, 1])));
    activations.push(alloc((160 + 16 * (step % 8)) * MiB, context([s, 'forward', 'mlp'], [3, 1])));
    for (let k = 0; k < 20; k += 1) free(alloc((k + 1) * 4096, context([s, 'forward', 'scratch'], [1])));
  }
  alloc(64 * MiB, context([s, 'leaky_cache'], [4, 1]));
  if (step === STEPS - 1) event('oom', 1536 * MiB, 6144 * MiB, 6144 * MiB, context([s, 'forward', 'huge'], [6, 1]));
  while (activations.length) free(activations.pop());
  event('segment_free', WORKSPACE, 512 * MiB, 0, 0);
  annotate([]);
}
SEGMENT = next - BASE;
events[0].size = SEGMENT;
for (const e of events) lines.push(e);

// The end state: the segment tiled by the blocks still alive and the gaps between them.
const blocks = [];
let cursor = BASE;
for (const [addr, [size, requested, ctx]] of [...live.entries()].sort((a, b) => a[0] - b[0])) {
  if (addr > cursor) blocks.push([cursor, addr - cursor, 0, 'inactive', 0]);
  blocks.push([addr, size, requested, 'active_allocated', ctx]);
  cursor = addr + size;
}
if (cursor < BASE + SEGMENT) blocks.push([cursor, BASE + SEGMENT - cursor, 0, 'inactive', 0]);
lines.push({ segment: BASE, device: 0, size: SEGMENT, stream: 0, pool: 'large', context: 0, blocks });
lines.push({ end: { events: events.length, segments: 1, dropped_events: 0 } });
writeFileSync(out, lines.map((l) => JSON.stringify(l)).join('\n') + '\n');
console.log(`wrote ${out}: ${events.length} events, ${live.size} blocks alive at the end`);
