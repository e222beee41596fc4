// memtrace's stack tree panel: the live allocated memory at the selected state under its call
// stacks, outermost frame first (what `python -m torch.cuda._memory_viz memory` draws as a
// flame graph), as a collapsible tree with a bar per node. The server builds the tree
// (/api/tree); this file only draws it. app.js calls memtraceTree.show(device, index) when the
// selected state changes and asks memtraceTree.param() for the tables' frame view. Sizes are
// written by chart.js's fmtBytes (called once every script is loaded).
// Text from the trace is only ever set with textContent, never parsed as HTML. Its styles are
// the #tree rules at the end of style.css (the page's CSP allows no inline style sheet).
'use strict';

(function () {
  const state = { device: null, index: null, seq: 0, data: null };

  function allFrames() {
    const box = document.getElementById('all-frames');
    return Boolean(box && box.checked);
  }

  // The query parameter the tables and the tree add for the frame view.
  function param() {
    return allFrames() ? '&all_frames=1' : '';
  }

  function row(node, total) {
    const r = document.createElement('span');
    r.className = 'tree-row';
    const share = total ? node.bytes / total : 0;
    const bar = document.createElement('span');
    bar.className = 'tree-bar';
    const fill = document.createElement('span');
    fill.style.width = (100 * share).toFixed(2) + '%';
    bar.append(fill);
    const bytes = document.createElement('span');
    bytes.className = 'tree-num';
    bytes.textContent = fmtBytes(node.bytes);
    const pct = document.createElement('span');
    pct.className = 'tree-num';
    pct.textContent = (100 * share).toFixed(1) + ' %';
    const name = document.createElement('span');
    name.className = 'tree-name';
    name.textContent = node.name;
    r.title = `${node.name}\n${fmtBytes(node.bytes)} in ${node.blocks} blocks (${(100 * share).toFixed(2)} % of allocated)`;
    r.append(bar, bytes, pct, name);
    return r;
  }

  // One node and, open to `openDepth` levels, its children.
  function nodeElement(node, total, depth, counter) {
    counter.n += 1;
    if (!node.children.length) {
      const leaf = document.createElement('div');
      leaf.className = 'tree-leaf';
      leaf.append(row(node, total));
      return leaf;
    }
    const details = document.createElement('details');
    if (depth < 3) details.open = true;
    const summary = document.createElement('summary');
    summary.append(row(node, total));
    details.append(summary);
    for (const child of node.children) details.append(nodeElement(child, total, depth + 1, counter));
    return details;
  }

  function render(data) {
    const box = document.getElementById('tree');
    const caption = document.getElementById('tree-caption');
    if (!box) return;
    box.replaceChildren();
    const counter = { n: 0 };
    box.append(nodeElement(data.tree, data.allocated_bytes, 0, counter));
    box.dataset.nodes = String(counter.n);
    box.dataset.index = String(data.index);
    if (caption) {
      caption.textContent = `${data.label}${data.is_peak ? ' (the allocated peak)' : ''}: ` +
        `${fmtBytes(data.allocated_bytes)} in ${data.blocks} allocated blocks (block sizes, not requested sizes), ` +
        `${data.all_frames ? 'every frame memory_viz shows' : "the user's own frames"}; ` +
        `nodes under ${(100 * data.min_share).toFixed(1)} % are folded into "<N smaller>".`;
    }
  }

  async function show(device, index) {
    state.device = device;
    state.index = index;
    state.seq += 1;
    const seq = state.seq;
    const query = new URLSearchParams({ device: String(device) });
    if (index !== undefined && index !== null) query.set('index', String(index));
    // The file of several this viewer shows (app.js passes the same to its calls).
    const file = new URLSearchParams(location.search).get('file');
    if (file !== null) query.set('file', file);
    try {
      const response = await fetch('/api/tree?' + query + param());
      const body = await response.json();
      if (!response.ok) throw new Error(body.error || response.statusText);
      if (seq !== state.seq) return; // a newer state was asked for meanwhile
      state.data = body;
      render(body);
    } catch (e) {
      const caption = document.getElementById('tree-caption');
      if (caption) caption.textContent = 'error: ' + e.message;
    }
  }

  function setup() {
    const box = document.getElementById('all-frames');
    if (box) {
      box.addEventListener('change', () => {
        if (state.device !== null) show(state.device, state.index);
        // app.js's tables name their sites in the same view.
        if (typeof loadTables === 'function') loadTables();
      });
    }
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', setup);
  else setup();

  window.memtraceTree = { show, param, data: () => state.data };
})();
