// The context panel: the facts, site, tags and stack of an allocation, an event or an
// out-of-memory event. Stacks fold away the frames memory_viz hides and the allocator's and
// dispatcher's plumbing (a button shows them), so the operator and the user's code come first;
// an out-of-memory event also shows where its device's memory was (/api/explain: the parts of
// reserved memory, which add up, live memory by what it holds, and why the request failed).
// Loaded after panels.js and before app.js; it uses their helpers when called.

function showContext(title, facts, context) {
  const body = $('context-body');
  body.replaceChildren();
  body.append(el('h3', title));
  const dl = el('dl');
  for (const [k, v] of facts) { dl.append(el('dt', k), el('dd', v)); }
  body.append(dl);
  body.append(el('div', 'site: ' + context.site));
  body.append(el('div', context.tags.length ? 'tags: ' + context.tags.join(' / ') : 'no tags', 'tags'));
  body.append(stackList(context));
}

// A frame as the panel writes it; line 0 is an unknown line (C++ frames without one).
function frameText([name, file, line]) {
  return file ? `${name}  ${file}:${line || '?'}` : name;
}

// The stack, innermost first, its plumbing frames left out until asked for.
function stackList(context) {
  const box = el('div', undefined, 'stack');
  if (!context.frames.length) { box.append(el('div', 'no stack recorded')); return box; }
  const plumbing = context.plumbing || [];
  const left = plumbing.filter(Boolean).length;
  const draw = (all) => {
    const ol = el('ol');
    context.frames.forEach((f, i) => { if (all || !plumbing[i]) ol.append(el('li', frameText(f))); });
    const what = left === 1 ? '1 frame' : `${left} frames`;
    const head = el('div', left && !all
      ? `stack, innermost first (${what} of the stack capture and the allocator left out) `
      : 'stack, innermost first: ');
    if (left) {
      const b = el('button', all ? 'leave them out' : 'show all', 'stack-toggle');
      b.type = 'button';
      b.addEventListener('click', () => draw(!all));
      head.append(b);
    }
    box.replaceChildren(head, ol);
  };
  draw(false);
  return box;
}

// Where the device's memory was at an out-of-memory event, below its context.
function showExplanation(r) {
  const e = r.explanation;
  const box = el('div', undefined, 'explain');
  box.append(el('h4', 'why it ran out'), el('p', e.why));
  const share = (b) => (e.reserved_bytes ? (100 * b / e.reserved_bytes).toFixed(1) + ' %' : '');
  const table = el('table', undefined, 'parts');
  table.append(row([[`reserved ${fmtBytes(e.reserved_bytes)}`], ['bytes', true], ['share', true]], true));
  for (const p of e.parts) {
    const tr = row([[p.name], [fmtBytes(p.bytes), true], [share(p.bytes), true]]);
    tr.dataset.part = p.key;
    table.append(tr);
  }
  box.append(table);
  if (e.categories.length) {
    const cats = el('table', undefined, 'categories');
    cats.append(row([['live allocations hold'], ['requested', true]], true));
    for (const c of e.categories) cats.append(row([[c.name], [fmtBytes(c.requested_bytes), true]]));
    box.append(cats);
  }
  const d = e.device;
  if (d.free_bytes !== null) {
    box.append(el('div', `device: ${fmtBytes(d.free_bytes)} free + ${fmtBytes(e.reserved_bytes)} reserved = ` +
      `${fmtBytes(d.free_bytes + e.reserved_bytes)} this process could use`));
  }
  box.append(el('div', `fragmentation: ${(100 * e.fragmentation).toFixed(2)} % (${e.fragmentation_definition}, here)`));
  $('context-body').append(box);
}
