// The dashboard page: runs a Klock kernel (wasm) in the page with a simulated swarm and shows
// it live. Virtual time is driven by requestAnimationFrame: every frame advances the
// simulation by the real time elapsed × speed (within a per-frame work budget, so rendering
// stays smooth and virtual time lags instead when the swarm is too busy), then redraws.
// The kernel is reached only through its wasm API (see sim.js); this file only renders.
//
// For tests and measurements, `window.klock` exposes the swarm, `step(n)` and live `perf`
// numbers (frames per second, kernel operations per second), mirrored on #perf as
// data-fps / data-ops.

import init, { Kernel } from './pkg/klock_wasm.js';
import { Swarm, RESOURCE_TREE, STATES } from './sim.js';

const STEP_MS = 100; // virtual ms per Step
const FRAME_BUDGET_MS = 9; // wall-clock simulation work per frame at most
const SLOW_RENDER_MS = 100; // panels other than the agent grid redraw at 10 Hz

const $ = (id) => document.getElementById(id);
const css = getComputedStyle(document.documentElement);
const color = (name) => css.getPropertyValue(`--${name}`).trim();
const STATE_COLORS = Object.fromEntries(STATES.map((s) => [s, color(s)]));
const STATE_LABELS = {
  planning: 'planning',
  waiting: 'waiting',
  executing: 'executing',
  backoff: 'died · backing off',
  stalled: 'stalled',
};
const escapeHtml = (s) => String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

await init();

let logShown = 0; // absolute index just past the newest entry rendered
let logBase = 0; // absolute index of log[0]
const ui = {
  running: true,
  speed: 1,
  selected: null,
  hover: -1,
  logSticky: true,
  logDirty: true,
  filter: '',
};
const log = []; // the newest LOG_KEEP..2*LOG_KEEP entries; log[0] has absolute index logBase
const LOG_KEEP = 600;

let swarm;
function makeSwarm() {
  if (swarm) swarm.free();
  swarm = new Swarm(Kernel, {
    policy: $('policy').value,
    agents: Number($('agents').value),
    skew: Number($('skew').value),
  });
  swarm.onLog((entry) => {
    log.push(entry);
    if (log.length > LOG_KEEP * 2) {
      logBase += log.length - LOG_KEEP;
      log.splice(0, log.length - LOG_KEEP);
    }
    ui.logDirty = true;
  });
  logBase += log.length;
  log.length = 0;
  ui.logDirty = true;
  renderLog(true);
  vtarget = 0;
  perf.samples = [];
}

// ---- performance counters -------------------------------------------------------------------

const perf = { fps: 0, opsPerSec: 0, queriesPerSec: 0, frames: 0, samples: [], lagging: false };

function measure(ts) {
  perf.frames++;
  perf.samples.push({ ts, ops: swarm.ops, queries: swarm.queries });
  while (perf.samples.length > 2 && ts - perf.samples[0].ts > 1000) perf.samples.shift();
  const first = perf.samples[0];
  const span = (ts - first.ts) / 1000;
  if (span > 0.25) {
    perf.fps = (perf.samples.length - 1) / span;
    perf.opsPerSec = (swarm.ops - first.ops) / span;
    perf.queriesPerSec = (swarm.queries - first.queries) / span;
  }
  perf.lagging = swarm.lagging;
}

function renderPerf() {
  const el = $('perf');
  el.dataset.fps = perf.fps.toFixed(1);
  el.dataset.ops = Math.round(perf.opsPerSec);
  el.dataset.queries = Math.round(perf.queriesPerSec);
  const k = (n) =>
    n >= 999950 ? `${(n / 1e6).toFixed(1)}M` : n >= 10000 ? `${(n / 1000).toFixed(1)}k` : String(Math.round(n));
  const text = `${perf.fps.toFixed(0)} fps · ${k(perf.opsPerSec)} ops/s${perf.lagging ? ' · lagging' : ''}`;
  setText(el, text);
  el.classList.toggle('lag', perf.lagging);
  // The header never wraps: on a narrow window the text is cut with an ellipsis, so the title
  // repeats it in full.
  el.title = `${text}: kernel operations per second (acquire, heartbeat, release, advance, ...); plus ${k(perf.queriesPerSec)} queries/s (snapshot, stats, events)`;
  $('vclock').textContent = `t = ${(swarm.now / 1000).toFixed(1)} s`;
}

// ---- counters and chart ---------------------------------------------------------------------

const CARDS = [
  ['granted', 'granted', 'granted'],
  ['waited', 'waited', 'waited'],
  ['died', 'died', 'died'],
  ['timedOut', 'timed out', 'timeout', 'timedOut'],
  ['expired', 'expired', 'expired'],
  ['wounded', 'wounded', 'wounded'],
  ['activeLeases', 'active leases', 'executing'],
  ['waitingTickets', 'waiting tickets', 'waiting'],
];

$('cards').innerHTML = CARDS.map(
  ([key, label, accent]) =>
    `<div class="card" data-key="${key}" style="--accent: var(--${accent})"><div class="k">${label}</div>` +
    '<div class="v">0</div><div class="d"></div></div>',
).join('');
const cardEls = CARDS.map(([key]) => {
  const card = document.querySelector(`.card[data-key="${key}"]`);
  return { v: card.querySelector('.v'), d: card.querySelector('.d') };
});

function setText(el, text) {
  if (el.textContent !== text) el.textContent = text;
}

function renderCards(stats) {
  const last = swarm.history.length > 1 ? swarm.history[swarm.history.length - 2] : null;
  CARDS.forEach(([key, , , histKey], i) => {
    const value = key in stats.counters ? stats.counters[key] : stats[key];
    setText(cardEls[i].v, value.toLocaleString('en-US'));
    const hk = histKey ?? key;
    setText(cardEls[i].d, last && hk in last ? `${last[hk]}/s` : '');
  });
}

const SERIES = [
  ['granted', 'grants', 'granted'],
  ['waited', 'waits', 'waited'],
  ['died', 'deaths', 'died'],
  ['timedOut', 'timeouts', 'timeout'],
];

$('chart-legend').innerHTML = SERIES.map(
  ([, label, c]) => `<span><i style="background: var(--${c})"></i>${label}</span>`,
).join('');

// Canvas sizes come from a ResizeObserver: reading clientWidth while drawing would force a
// synchronous layout after every DOM update.
const canvasSizes = new Map();
const resizer = new ResizeObserver((entries) => {
  for (const e of entries) canvasSizes.set(e.target, { w: e.contentRect.width, h: e.contentRect.height });
});

function setupCanvas(canvas) {
  if (!canvasSizes.has(canvas)) {
    canvasSizes.set(canvas, { w: canvas.clientWidth, h: canvas.clientHeight });
    resizer.observe(canvas);
  }
  const { w: cw, h: ch } = canvasSizes.get(canvas);
  const dpr = window.devicePixelRatio || 1;
  const w = Math.max(1, Math.round(cw * dpr));
  const h = Math.max(1, Math.round(ch * dpr));
  if (canvas.width !== w || canvas.height !== h) {
    canvas.width = w;
    canvas.height = h;
  }
  const ctx = canvas.getContext('2d');
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  return { ctx, w: cw, h: ch };
}

function renderChart() {
  const { ctx, w, h } = setupCanvas($('chart'));
  ctx.clearRect(0, 0, w, h);
  const N = 90;
  const currentBucket = Math.floor(swarm.now / swarm.bucketMs);
  const byBucket = new Map(swarm.history.map((b) => [b.bucket, b]));
  const buckets = [];
  for (let b = currentBucket - N + 1; b <= currentBucket; b++) buckets.push(byBucket.get(b));
  let max = 4;
  for (const b of buckets) if (b) for (const [k] of SERIES) max = Math.max(max, b[k]);
  const nice = 10 ** Math.floor(Math.log10(max));
  max = Math.ceil(max / nice) * nice;
  const pad = { l: 34, r: 8, t: 8, b: 16 };
  const x = (i) => pad.l + (i / (N - 1)) * (w - pad.l - pad.r);
  const y = (v) => h - pad.b - (v / max) * (h - pad.t - pad.b);
  ctx.font = '10px ui-monospace, monospace';
  ctx.fillStyle = color('faint');
  ctx.strokeStyle = '#232a38';
  ctx.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const v = (max / 4) * i;
    ctx.beginPath();
    ctx.moveTo(pad.l, Math.round(y(v)) + 0.5);
    ctx.lineTo(w - pad.r, Math.round(y(v)) + 0.5);
    ctx.stroke();
    ctx.textAlign = 'right';
    ctx.fillText(v >= 1000 ? `${v / 1000}k` : String(v), pad.l - 5, y(v) + 3);
  }
  ctx.textAlign = 'left';
  ctx.fillText(`-${N}s`, pad.l, h - 3);
  ctx.textAlign = 'right';
  ctx.fillText('now', w - pad.r, h - 3);
  for (const [key, , c] of SERIES) {
    ctx.strokeStyle = color(c);
    ctx.lineWidth = 1.6;
    ctx.lineJoin = 'round';
    ctx.beginPath();
    buckets.forEach((b, i) => {
      const v = b ? b[key] : 0;
      if (i === 0) ctx.moveTo(x(i), y(v));
      else ctx.lineTo(x(i), y(v));
    });
    ctx.stroke();
  }
}

function renderTopLists(stats) {
  const top = stats.topContended.slice(0, 7);
  $('contended').innerHTML = top.length
    ? top
        .map((c) => `<li><span>${escapeHtml(c.resource)}</span><span>${c.blocked.toLocaleString('en-US')}</span></li>`)
        .join('')
    : '<li><span class="hint">nothing blocked yet</span><span></span></li>';
  const ghosts = stats.ghostAgents.slice(0, 5);
  $('ghosts').innerHTML = ghosts.length
    ? ghosts
        .map((g) => `<li><span>${escapeHtml(g.agentId)}</span><span>${g.expiredLeases} · ${g.waitTimeouts}</span></li>`)
        .join('')
    : '<li><span class="hint">none</span><span></span></li>';
}

// ---- agents grid ----------------------------------------------------------------------------

let layout = { cols: 1, cell: 10, gap: 2 };
let highlighted = new Set(); // sessions holding or waiting on the selected resource

function gridLayout(n, w, h) {
  let cell = Math.floor(Math.sqrt((w * h) / Math.max(n, 1)));
  for (; cell > 3; cell--) {
    const cols = Math.floor(w / cell);
    if (cols > 0 && cols * Math.floor(h / cell) >= n) break;
  }
  const cols = Math.max(1, Math.floor(w / cell));
  const gap = cell > 14 ? 3 : cell > 7 ? 2 : 1;
  return { cols, cell, gap };
}

function renderAgents() {
  const canvas = $('agents-canvas');
  const { ctx, w, h } = setupCanvas(canvas);
  ctx.clearRect(0, 0, w, h);
  const agents = swarm.agents;
  layout = gridLayout(agents.length, w, h);
  const { cols, cell, gap } = layout;
  const size = cell - gap;
  const radius = Math.min(5, size / 4);
  const label = size >= 26;
  ctx.font = `${Math.max(9, Math.min(12, size / 3.2))}px ui-monospace, monospace`;
  ctx.textAlign = 'center';
  ctx.textBaseline = 'middle';
  const now = swarm.now;
  for (let i = 0; i < agents.length; i++) {
    const a = agents[i];
    const x = (i % cols) * cell;
    const y = Math.floor(i / cols) * cell;
    const c = STATE_COLORS[a.state];
    ctx.globalAlpha = a.state === 'planning' ? 0.55 : 1;
    ctx.fillStyle = c;
    roundRect(ctx, x, y, size, size, radius);
    ctx.fill();
    ctx.globalAlpha = 1;
    if (a.state === 'executing' && a.workEnd > a.since) {
      // Work progress as a darker band filling from the bottom.
      const done = Math.min(1, (now - a.since) / (a.workEnd - a.since));
      ctx.fillStyle = 'rgba(0,0,0,0.28)';
      ctx.fillRect(x, y, size, Math.round(size * (1 - done)));
    } else if (a.state === 'backoff' && a.wake > a.since) {
      const left = Math.max(0, (a.wake - now) / (a.wake - a.since));
      ctx.fillStyle = 'rgba(0,0,0,0.35)';
      ctx.fillRect(x, y + size - Math.round(size * (1 - left)), size, Math.round(size * (1 - left)));
    }
    if (highlighted.has(a.session) || i === ui.hover) {
      ctx.strokeStyle = '#ffffff';
      ctx.lineWidth = 2;
      roundRect(ctx, x + 1, y + 1, size - 2, size - 2, radius);
      ctx.stroke();
    }
    if (label) {
      ctx.fillStyle = 'rgba(8,10,14,0.8)';
      ctx.fillText(String(i + 1), x + size / 2, y + size / 2 + 0.5);
    }
  }
}

function roundRect(ctx, x, y, w, h, r) {
  ctx.beginPath();
  ctx.moveTo(x + r, y);
  ctx.arcTo(x + w, y, x + w, y + h, r);
  ctx.arcTo(x + w, y + h, x, y + h, r);
  ctx.arcTo(x, y + h, x, y, r);
  ctx.arcTo(x, y, x + w, y, r);
  ctx.closePath();
}

$('state-counts').innerHTML = STATES.map(
  (s) => `<span data-state="${s}"><i style="background:${STATE_COLORS[s]}"></i>${STATE_LABELS[s]} <b>0</b></span>`,
).join('');
const stateEls = Object.fromEntries(STATES.map((s) => [s, document.querySelector(`[data-state="${s}"] b`)]));

function renderStateCounts() {
  const counts = swarm.stateCounts();
  for (const s of STATES) setText(stateEls[s], String(counts[s]));
}

function renderAgentInfo() {
  const a = swarm.agents[ui.hover];
  if (!a) {
    $('agent-info').textContent = 'Hover an agent to see what it is doing.';
    return;
  }
  const age = ((swarm.now - a.since) / 1000).toFixed(1);
  const what = a.manifest.length ? a.manifest.join(', ') : '—';
  const extra =
    a.state === 'waiting'
      ? ` ticket ${a.ticket}`
      : a.state === 'backoff'
        ? ` retry in ${Math.max(0, a.wake - swarm.now)} ms`
        : '';
  $('agent-info').innerHTML =
    `<b>${a.name}</b> · session ${a.session} · priority ${a.priority} · ` +
    `<b style="color:${STATE_COLORS[a.state]}">${STATE_LABELS[a.state]}</b> ${age}s${extra} · ${a.done} done · ${escapeHtml(what)}`;
}

$('agents-canvas').addEventListener('mousemove', (ev) => {
  const r = ev.currentTarget.getBoundingClientRect();
  const col = Math.floor((ev.clientX - r.left) / layout.cell);
  const row = Math.floor((ev.clientY - r.top) / layout.cell);
  const i = col < layout.cols ? row * layout.cols + col : -1;
  ui.hover = i >= 0 && i < swarm.agents.length ? i : -1;
  renderAgentInfo();
});
$('agents-canvas').addEventListener('mouseleave', () => {
  ui.hover = -1;
  renderAgentInfo();
});

// ---- resource tree --------------------------------------------------------------------------

const TREE_ROWS = (() => {
  const all = [...RESOURCE_TREE.directories, ...RESOURCE_TREE.files].sort((a, b) => {
    // Directories before the files beside them, like a file browser.
    const pa = a.split('/');
    const pb = b.split('/');
    for (let i = 0; i < Math.min(pa.length, pb.length); i++) {
      if (pa[i] !== pb[i]) {
        const aDir = i < pa.length - 1 || RESOURCE_TREE.directories.includes(a);
        const bDir = i < pb.length - 1 || RESOURCE_TREE.directories.includes(b);
        if (aDir !== bDir) return aDir ? -1 : 1;
        return pa[i] < pb[i] ? -1 : 1;
      }
    }
    return pa.length - pb.length;
  });
  const rows = all.map((r) => {
    const parts = r.slice('FILE:'.length).split('/').filter(Boolean);
    return {
      resource: r,
      depth: parts.length - 1,
      label: parts[parts.length - 1] + (RESOURCE_TREE.directories.includes(r) ? '/' : ''),
      kind: RESOURCE_TREE.directories.includes(r) ? 'dir' : 'file',
    };
  });
  for (const l of RESOURCE_TREE.leaders) rows.push({ resource: l, depth: 0, label: l, kind: 'leader' });
  return rows;
})();

function shortName(agentId) {
  return agentId.replace(/^agent-0*/, '');
}

// Rows are built once; each redraw only rewrites the chips of rows whose holders or queue changed.
$('tree').innerHTML = TREE_ROWS.map(
  (row) =>
    `<div class="row ${row.kind}" data-r="${escapeHtml(row.resource)}" style="padding-left: ${6 + row.depth * 14}px">` +
    `<span class="name">${escapeHtml(row.label)}</span><span class="chips"></span><span class="qn zero">·</span></div>`,
).join('');
const treeEls = TREE_ROWS.map((row) => {
  const el = document.querySelector(`.row[data-r="${CSS.escape(row.resource)}"]`);
  return { el, chips: el.querySelector('.chips'), qn: el.querySelector('.qn'), html: '', q: -1 };
});

function renderTree(snapshot) {
  const holders = new Map();
  for (const l of snapshot.leases) {
    if (!holders.has(l.resource)) holders.set(l.resource, []);
    holders.get(l.resource).push(l);
  }
  const queues = new Map();
  for (const t of snapshot.tickets) {
    for (const i of t.intents) {
      if (!queues.has(i.resource)) queues.set(i.resource, []);
      queues.get(i.resource).push({ agentId: t.agentId, predicate: i.predicate, ticket: t.ticket });
    }
  }
  TREE_ROWS.forEach((row, i) => {
    const held = holders.get(row.resource) ?? [];
    const queued = queues.get(row.resource) ?? [];
    const chips = held
      .slice(0, 4)
      .map(
        (l) =>
          `<span class="chip p-${l.predicate}" title="${l.agentId} holds ${l.predicate} (fence ${l.fence})">${shortName(l.agentId)}</span>`,
      );
    if (held.length > 4) chips.push(`<span class="chip more">+${held.length - 4}</span>`);
    const qchips = queued
      .slice(0, 3)
      .map(
        (q) =>
          `<span class="chip q p-${q.predicate}" title="${q.agentId} waits for ${q.predicate} (ticket ${q.ticket})">${shortName(q.agentId)}</span>`,
      );
    const html = chips.join('') + qchips.join('');
    const t = treeEls[i];
    if (t.html !== html) {
      t.html = html;
      t.chips.innerHTML = html;
    }
    if (t.q !== queued.length) {
      t.q = queued.length;
      t.qn.textContent = queued.length ? `${queued.length} waiting` : '·';
      t.qn.classList.toggle('zero', queued.length === 0);
    }
  });
}

$('tree').addEventListener('click', (ev) => {
  const row = ev.target.closest('.row');
  if (!row) return;
  ui.selected = row.dataset.r;
  for (const r of $('tree').querySelectorAll('.row')) r.classList.toggle('selected', r.dataset.r === ui.selected);
  renderDetail();
});

// ---- resource detail ------------------------------------------------------------------------

function renderDetail() {
  const el = $('detail');
  if (!ui.selected) {
    highlighted = new Set();
    return;
  }
  const state = swarm.resourceState(ui.selected);
  highlighted = new Set([...state.holders, ...state.waiting].map((x) => x.sessionId));
  $('detail-name').textContent = state.resource;
  const now = swarm.now;
  const inMs = (t) => `${Math.max(0, t - now)} ms`;
  const table = (title, head, rows) =>
    `<h4>${title} (${rows.length})</h4>` +
    (rows.length
      ? `<table><tr>${head.map((x) => `<th>${x}</th>`).join('')}</tr>${rows.map((r) => `<tr>${r.map((c) => `<td>${c}</td>`).join('')}</tr>`).join('')}</table>`
      : '<div class="none">none</div>');
  el.innerHTML =
    table(
      'holders',
      ['agent', 'predicate', 'lease', 'fence', 'expires in'],
      state.holders.map((x) => [
        escapeHtml(x.agentId),
        `<span class="chip p-${x.predicate}">${x.predicate}</span>`,
        x.leaseId,
        x.fence,
        inMs(x.expiresAt),
      ]),
    ) +
    table(
      'waiting',
      ['#', 'agent', 'predicate', 'ticket', 'times out in'],
      state.waiting.map((x) => [
        x.position,
        escapeHtml(x.agentId),
        `<span class="chip q p-${x.predicate}">${x.predicate}</span>`,
        x.ticket,
        inMs(x.deadline),
      ]),
    ) +
    table(
      'covering',
      ['agent', 'predicate', 'on'],
      state.covering.map((x) => [
        escapeHtml(x.agentId),
        `<span class="chip p-${x.predicate}">${x.predicate}</span>`,
        escapeHtml(x.resource),
      ]),
    );
  el.dataset.holders = String(state.holders.length);
}

// ---- log ------------------------------------------------------------------------------------
// Newest first. While the view is at the top ("live"), new lines are prepended and old ones
// trimmed, so a busy swarm never re-lays out the whole list; scrolling down freezes the view
// (the "↑ live" button returns to it). The filter matches agent, kind and text.

const LOG_LIVE_LINES = 80;

function logLine(e) {
  const div = document.createElement('div');
  div.className = 'ln';
  div.innerHTML =
    `<span class="t">${(e.t / 1000).toFixed(3)}s</span><span class="a">${e.agent}</span>` +
    `<span class="k k-${e.kind}">${e.kind}</span><span class="x">${escapeHtml(e.text)}</span>`;
  return div;
}

function logMatches(e) {
  const f = ui.filter.toLowerCase();
  return !f || `${e.agent} ${e.kind} ${e.text}`.toLowerCase().includes(f);
}

function renderLog(rebuild = false) {
  if (!ui.logSticky || (!ui.logDirty && !rebuild)) return;
  ui.logDirty = false;
  const el = $('log');
  const end = logBase + log.length;
  if (rebuild || logShown < logBase) {
    el.textContent = '';
    logShown = logBase;
  }
  // The newest matching entries not yet shown, newest first, at most a screenful.
  const fresh = [];
  for (let i = end - 1; i >= Math.max(logShown, logBase) && fresh.length < LOG_LIVE_LINES; i--) {
    const e = log[i - logBase];
    if (logMatches(e)) fresh.push(e);
  }
  logShown = end;
  if (fresh.length === 0) return;
  const frag = document.createDocumentFragment();
  for (const e of fresh) frag.appendChild(logLine(e));
  el.insertBefore(frag, el.firstChild);
  while (el.childElementCount > LOG_LIVE_LINES) el.lastElementChild.remove();
}

/** Shows everything kept (up to LOG_KEEP lines) when the user scrolls into the history. */
function renderLogHistory() {
  const el = $('log');
  const frag = document.createDocumentFragment();
  let n = 0;
  for (let i = log.length - 1; i >= 0 && n < LOG_KEEP; i--) {
    if (!logMatches(log[i])) continue;
    frag.appendChild(logLine(log[i]));
    n++;
  }
  const top = el.scrollTop;
  el.textContent = '';
  el.appendChild(frag);
  el.scrollTop = top;
}

$('log').addEventListener('scroll', (ev) => {
  const atTop = ev.currentTarget.scrollTop < 8;
  if (atTop === ui.logSticky) return;
  ui.logSticky = atTop;
  $('log-live').hidden = atTop;
  if (atTop) renderLog(true);
  else renderLogHistory();
});
$('log-live').addEventListener('click', () => {
  $('log').scrollTop = 0;
});
$('log-filter').addEventListener('input', (ev) => {
  ui.filter = ev.target.value.trim();
  if (ui.logSticky) renderLog(true);
  else renderLogHistory();
});

// ---- controls -------------------------------------------------------------------------------

function setRunning(running) {
  ui.running = running;
  $('pause').textContent = running ? 'Pause' : 'Resume';
  $('pause').classList.toggle('active', !running);
}

$('pause').addEventListener('click', () => setRunning(!ui.running));
$('step').addEventListener('click', () => step(1));
$('reset').addEventListener('click', () => {
  makeSwarm();
  renderSlow();
});
$('policy').addEventListener('change', () => {
  makeSwarm();
  renderSlow();
});
$('agents').addEventListener('input', (ev) => {
  $('agents-out').value = ev.target.value;
  swarm.setAgentCount(Number(ev.target.value));
});
$('skew').addEventListener('input', (ev) => {
  $('skew-out').value = Number(ev.target.value).toFixed(1);
  swarm.setSkew(Number(ev.target.value));
});
$('speed').addEventListener('change', (ev) => {
  ui.speed = ev.target.value === 'max' ? 'max' : Number(ev.target.value);
});
document.addEventListener('keydown', (ev) => {
  if (ev.target instanceof HTMLInputElement || ev.target instanceof HTMLSelectElement) return;
  if (ev.key === ' ') {
    ev.preventDefault();
    setRunning(!ui.running);
  } else if (ev.key === 's') {
    step(1);
  }
});

/** Pauses and advances the simulation by `n` steps of STEP_MS virtual ms each. */
function step(n = 1) {
  setRunning(false);
  for (let i = 0; i < n; i++) swarm.advanceTo(swarm.now + STEP_MS);
  vtarget = swarm.now;
  renderSlow();
  renderAgents();
  return swarm.now;
}

// ---- the frame loop -------------------------------------------------------------------------

let last = null;
let vtarget = 0;
let lastSlow = -Infinity;

function renderSlow() {
  const stats = swarm.stats();
  renderCards(stats);
  renderTopLists(stats);
  renderChart();
  renderTree(swarm.snapshot());
  renderDetail();
  renderStateCounts();
  renderAgentInfo();
  renderLog();
  renderPerf();
}

function frame(ts) {
  const dt = last === null ? 0 : Math.min(ts - last, 100);
  last = ts;
  if (ui.running) {
    if (ui.speed === 'max') vtarget = swarm.now + 5000;
    else vtarget = Math.max(vtarget, swarm.now) + dt * ui.speed;
    swarm.advanceTo(Math.floor(vtarget), FRAME_BUDGET_MS, () => performance.now());
    if (swarm.lagging) vtarget = swarm.now;
  }
  measure(ts);
  renderAgents();
  if (ts - lastSlow >= SLOW_RENDER_MS) {
    lastSlow = ts;
    renderSlow();
  }
  requestAnimationFrame(frame);
}

makeSwarm();
renderSlow();
requestAnimationFrame(frame);

window.klock = {
  get swarm() {
    return swarm;
  },
  perf,
  step,
  setRunning,
  ready: true,
};
document.body.dataset.ready = 'true';
