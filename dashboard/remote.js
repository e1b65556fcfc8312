// The dashboard against a real `klock serve`: a live view of one namespace, and a replay of
// the server's history in the page's own kernel (klock-wasm), with a time scrubber.
//
// Live: the namespace's watch stream is read with `fetch` (EventSource cannot send an
// Authorization header) and parsed as Server-Sent Events; the state (sessions, leases, queues,
// stats) is the server's overview (GET /v1/ns/{ns}/overview), re-read after events and every
// 250 ms, so a grant made without any event (an immediate GRANTED verdict) shows within a
// second. When the stream or a read fails (a restarting server), the page says so and
// reconnects with capped exponential backoff (250 ms doubling up to 5 s, with jitter),
// resumes the stream after the last event id it saw (Last-Event-ID) and re-reads the state.
// Event ids count entries of one log, which the server names (the SSE answer's `Klock-Log`
// header): the page sends its cursor's log (`log=`), and a server of another log (an in-memory
// server restarted) reads its stream from its start, which the page lists as the server
// starting over (docs/SPEC.md, "A cursor belongs to one log").
// The verdict stream shows the events, and grants and waits as the state shows them appear
// (a DIE changes no state and is only counted live; the replay lists every verdict).
//
// Replay: GET /v1/ns/{ns}/history (a token covering every namespace) gives the kernel state at
// the range's start and every kernel call after it; `Replayer` (the wasm package) applies them
// exactly as the server did, so the state shown at any instant is the server's (its state hash
// is shown, and is what the tests compare with GET /v1/state/hash?index=). A first pass records
// the namespace's verdicts and events and keeps a copy of the kernel every CHECKPOINT steps, so
// scrubbing back is a copy plus at most CHECKPOINT steps. Clicking a DIE or WAIT verdict
// explains it from the replayed state at that step: who blocked whom, their priorities, and
// why the policy chose that verdict.
//
// The page reaches the server it was served by (`klock serve --dashboard`), or another one
// that allows the page's origin (`klock serve --allow-origin ORIGIN`, CORS).
//
// Both views show the wait-for graph of the state shown (waitfor.js: who waits for whom) and,
// under policy detect (docs/SPEC.md §6.1), the last wait-for cycle the kernel broke, as its DIE
// verdict or DIED event named it (the victim first): live from the DIED events (a DIE verdict
// is not streamed), in the replay from both, as of the step shown.
//
// Tests and measurements read `window.klock` (mode, status, lastEventId, replay controls, fps).

import { waitFor, cycleText } from './waitfor.js';

const $ = (id) => document.getElementById(id);
const written = new Map();
/** Sets an element's HTML only when it changed (a rewrite costs a layout and a paint). */
function html(id, text) {
  if (written.get(id) === text) return;
  written.set(id, text);
  $(id).innerHTML = text;
}
const SLOW_RENDER_MS = 250; // while playing, tables and the log redraw at 4 Hz
const STEP_BUDGET_MS = 6; // replay work per frame at max speed
const escapeHtml = (s) => String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
const CHECKPOINT = 2000; // replay steps between kept kernel copies
const LOG_SHOWN = 80; // verdict lines rendered at once (the panel shows about 18)
const POLL_MS = 250; // the overview is re-read at least this often (a grant makes no event)
const ROWS = 60; // table rows rendered at most (a panel shows about 15)

const state = {
  mode: 'live',
  server: '',
  ns: 'default',
  token: '',
  status: 'starting',
  lastEventId: '0.0',
  cursorLog: null, // the log lastEventId counts entries of (the stream's Klock-Log)
  overview: null,
  log: [], // newest last: {t, kind, agent, text, ...}
  selected: null,
  lastCycle: null, // the log entry of the last wait-for cycle broken (live)
  fps: 0,
};
window.klock = { ready: false, state };

// ---- connection settings --------------------------------------------------------------------

function settings(params) {
  const hash = new URLSearchParams(location.hash.slice(1));
  const served = location.pathname.startsWith('/dashboard');
  state.server = (params.get('server') || (served ? location.origin : '')).replace(/\/+$/, '');
  state.ns = params.get('ns') || 'default';
  state.mode = params.get('mode') === 'replay' || params.has('replay') ? 'replay' : 'live';
  state.token = hash.get('token') || params.get('token') || sessionStorage.getItem('klock-token') || '';
  state.range = { from: params.get('from'), to: params.get('to') };
}

function headers(extra = {}) {
  const h = { ...extra };
  if (state.token) h.Authorization = `Bearer ${state.token}`;
  return h;
}

function api(path) {
  return `${state.server}/v1${path}`;
}

const nsPath = () => `/ns/${encodeURIComponent(state.ns)}`;

/** GET a JSON route; throws an Error with the server's error name and message. */
async function getJson(path, signal) {
  const res = await fetch(api(path), { headers: headers(), signal, cache: 'no-store' });
  const text = await res.text();
  if (!res.ok) throw httpError(res, text);
  return JSON.parse(text);
}

function httpError(res, text) {
  let name = `HTTP ${res.status}`;
  let message = text.slice(0, 300);
  try {
    const e = JSON.parse(text).error;
    name = e.name;
    message = e.message;
  } catch {
    // not a JSON error: keep the text
  }
  const err = new Error(`${name}: ${message}`);
  err.status = res.status;
  err.name = name;
  return err;
}

// ---- layout ---------------------------------------------------------------------------------

function layout() {
  document.title = `Klock · ${state.mode} · ${state.ns}`;
  document.body.innerHTML = `
  <header class="bar">
    <div class="brand"><span class="logo"></span>Klock <span class="sub" id="mode-name">${state.mode}</span></div>
    <form id="conn" class="conn" autocomplete="off">
      <input id="f-server" type="url" placeholder="server (http://127.0.0.1:7300)" value="${escapeHtml(state.server)}" size="24">
      <input id="f-ns" type="text" placeholder="namespace" value="${escapeHtml(state.ns)}" size="10">
      <input id="f-token" type="password" placeholder="bearer token (optional)" value="${escapeHtml(state.token)}" size="14">
      <button type="submit" data-mode="live">Live</button>
      <button type="submit" data-mode="replay">Replay</button>
    </form>
    <a class="btn" href="./" title="The simulated swarm">Simulation</a>
    <div class="clock"><span id="status" class="status" data-status="starting">starting</span><span id="vclock">–</span></div>
  </header>
  <div class="scrub" id="scrub" ${state.mode === 'replay' ? '' : 'hidden'}>
    <button id="play" type="button" title="Play or pause (space)">Play</button>
    <label class="ctl">speed
      <select id="speed">
        <option value="1">1×</option><option value="10">10×</option><option value="100" selected>100×</option>
        <option value="1000">1000×</option><option value="max">max</option>
      </select>
    </label>
    <input id="scrubber" type="range" min="0" max="0" value="0" step="1" aria-label="time">
    <span id="where" class="mono">–</span>
    <span id="hash" class="mono hint" title="the replayed kernel's state hash (the server's at this log index)">–</span>
  </div>
  <main class="grid remote">
    <section class="panel stats" aria-label="counters">
      <div class="cards" id="cards"></div>
      <div class="panel-title">top contended</div>
      <ol id="contended" class="toplist"></ol>
      <div class="panel-title">ghost agents <span class="hint">expired leases · timeouts</span></div>
      <ol id="ghosts" class="toplist"></ol>
    </section>
    <section class="panel sessions" aria-label="sessions">
      <div class="panel-title">sessions <span class="hint" id="sessions-n"></span></div>
      <div class="table-wrap"><table class="tbl" id="sessions"></table></div>
    </section>
    <section class="panel leases" aria-label="leases and queues">
      <div class="panel-title">leases <span class="hint" id="leases-n"></span></div>
      <div class="table-wrap"><table class="tbl" id="leases"></table></div>
      <div class="panel-title">queues <span class="hint" id="queues-n"></span></div>
      <div class="table-wrap short"><table class="tbl" id="queues"></table></div>
      <div class="panel-title">wait-for <span class="hint" id="waitfor-n"></span></div>
      <div class="table-wrap edges"><table class="tbl" id="waitfor"></table></div>
      <div id="cycle" class="cycle hint">no wait-for cycle broken</div>
    </section>
    <section class="panel log" aria-label="verdicts">
      <div class="panel-title">verdicts and events <span class="hint">newest first · click a DIE or WAIT</span></div>
      <div class="log-lines" id="log"></div>
    </section>
    <section class="panel detail" aria-label="explanation">
      <div class="panel-title">why <span id="detail-name" class="mono"></span></div>
      <div id="detail" class="detail-body"><p class="hint">Click a DIE or WAIT verdict (replay) to see who blocked whom and why the policy chose it.</p></div>
    </section>
  </main>`;
  $('conn').addEventListener('submit', (e) => {
    e.preventDefault();
    const mode = e.submitter?.dataset.mode || state.mode;
    const token = $('f-token').value.trim();
    if (token) sessionStorage.setItem('klock-token', token);
    else sessionStorage.removeItem('klock-token');
    const q = new URLSearchParams({
      server: $('f-server').value.trim(),
      ns: $('f-ns').value.trim() || 'default',
      mode,
    });
    location.href = `${location.pathname}?${q}`;
  });
  $('log').addEventListener('click', (e) => {
    const line = e.target.closest('.ln');
    if (line) explain(Number(line.dataset.i));
  });
}

const CARDS = [
  ['sessions', 'sessions', 'planning'],
  ['leases', 'leases', 'executing'],
  ['waiting', 'waiting', 'waiting'],
  ['granted', 'granted', 'granted'],
  ['waited', 'waited', 'waited'],
  ['died', 'died', 'died'],
  ['timed_out', 'timed out', 'timeout'],
  ['expired', 'expired', 'expired'],
];

function setStatus(status, text) {
  state.status = status;
  const el = $('status');
  if (!el) return;
  el.dataset.status = status;
  el.textContent = text ?? status;
  el.title = text ?? status;
}

// ---- rendering (the same for live and replay) ----------------------------------------------

/** A snapshot (docs/SPEC.md §10, snake_case) cut to the namespace. */
function cut(snapshot) {
  const sessions = snapshot.sessions.filter((s) => s.namespace === state.ns);
  const ids = new Set(sessions.map((s) => s.session_id));
  return {
    ...snapshot,
    sessions,
    leases: snapshot.leases.filter((l) => ids.has(l.session_id)),
    tickets: snapshot.tickets.filter((t) => ids.has(t.session_id)),
    stats: {
      ...snapshot.stats,
      top_contended: snapshot.stats.top_contended.filter((c) => c.namespace === state.ns),
    },
  };
}

const ms = (n) => (n >= 10_000 ? `${(n / 1000).toFixed(0)} s` : n >= 1000 ? `${(n / 1000).toFixed(1)} s` : `${n} ms`);

/** Draws a snapshot; with `full` false only the counters (the rest is drawn at 4 Hz while playing). */
function render(snap, now, full = true) {
  const c = snap.stats.counters;
  const values = {
    sessions: snap.sessions.length,
    leases: snap.leases.length,
    waiting: snap.tickets.length,
    granted: c.granted,
    waited: c.waited,
    died: c.died,
    timed_out: c.timed_out,
    expired: c.expired,
  };
  html(
    'cards',
    CARDS.map(
      ([key, label, accent]) =>
        `<div class="card" data-key="${key}" style="--accent: var(--${accent})"><div class="k">${label}</div>` +
        `<div class="v">${values[key].toLocaleString('en')}</div></div>`,
    ).join(''),
  );
  if (!full) return;
  const top = snap.stats.top_contended.slice(0, 10);
  html(
    'contended',
    top.length
      ? top
          .map(
            (t) =>
              `<li><span title="${escapeHtml(t.resource)}">${escapeHtml(t.resource)}</span><span>${t.blocked}</span></li>`,
          )
          .join('')
      : '<li><span class="hint">nothing blocked yet</span><span></span></li>',
  );
  const ghosts = snap.stats.ghost_agents.slice(0, 10);
  html(
    'ghosts',
    ghosts.length
      ? ghosts
          .map(
            (g) =>
              `<li><span>${escapeHtml(g.agent_id)}</span><span>${g.expired_leases} · ${g.wait_timeouts}</span></li>`,
          )
          .join('')
      : '<li><span class="hint">none</span><span></span></li>',
  );
  const held = new Map();
  for (const l of snap.leases) held.set(l.session_id, (held.get(l.session_id) ?? 0) + 1);
  $('sessions-n').textContent = `${snap.sessions.length} open`;
  html(
    'sessions',
    '<tr><th>agent</th><th>session</th><th>priority</th><th>leases</th><th>waits</th><th>state</th></tr>' +
      snap.sessions
        .slice(0, ROWS)
        .map(
          (s) =>
            `<tr data-session="${s.session_id}"><td>${escapeHtml(s.agent_id)}</td><td>${s.session_id}</td><td>${s.priority}</td>` +
            `<td>${held.get(s.session_id) ?? 0}</td><td>${s.tickets.length}</td>` +
            `<td>${s.suspended ? '<span class="k-RESTART">suspended</span>' : s.die_count ? `<span class="k-DIE">died ×${s.die_count}</span>` : 'active'}</td></tr>`,
        )
        .join('') +
      more(snap.sessions.length, 6),
  );
  $('leases-n').textContent = `${snap.leases.length} held`;
  html(
    'leases',
    '<tr><th>resource</th><th>intent</th><th>agent</th><th>fence</th><th>expires in</th></tr>' +
      snap.leases
        .slice(0, ROWS)
        .map(
          (l) =>
            `<tr data-lease="${l.lease_id}"><td title="${escapeHtml(l.resource)}">${escapeHtml(l.resource)}</td>` +
            `<td><span class="chip p-${l.predicate}">${l.predicate}</span></td><td>${escapeHtml(l.agent_id)}</td>` +
            `<td>${l.fence}</td><td>${ms(Math.max(0, l.expires_at - now))}</td></tr>`,
        )
        .join('') +
      more(snap.leases.length, 5),
  );
  $('queues-n').textContent = `${snap.tickets.length} waiting`;
  html(
    'queues',
    '<tr><th>ticket</th><th>agent</th><th>waits for</th><th>gives up in</th></tr>' +
      snap.tickets
        .slice(0, ROWS)
        .map(
          (t) =>
            `<tr><td>${t.ticket}</td><td>${escapeHtml(t.agent_id)}</td>` +
            `<td>${t.intents.map((i) => `<span class="chip q p-${i.predicate}">${i.predicate} ${escapeHtml(i.resource)}</span>`).join(' ')}</td>` +
            `<td>${ms(Math.max(0, t.deadline - now))}</td></tr>`,
        )
        .join('') +
      more(snap.tickets.length, 4),
  );
  const agent = new Map(snap.sessions.map((s) => [s.session_id, s.agent_id]));
  const who = (session) => `${escapeHtml(agent.get(session) ?? '?')} <span class="hint">(${session})</span>`;
  const edges = waitFor(snap);
  $('waitfor-n').textContent = `${edges.length} edge${edges.length === 1 ? '' : 's'}`;
  html(
    'waitfor',
    '<tr><th>waiter</th><th></th><th>waits for</th><th>ticket</th></tr>' +
      edges
        .slice(0, ROWS)
        .map(
          (e) =>
            `<tr data-from="${e.from}" data-to="${e.to}"><td>${who(e.from)}</td><td>→</td><td>${who(e.to)}</td><td>${e.ticket}</td></tr>`,
        )
        .join('') +
      more(edges.length, 4),
  );
}

/** The last cycle broken (a log entry with `cycle`, or null), shown under the wait-for edges. */
function renderCycle(entry) {
  const el = $('cycle');
  const text = entry
    ? `cycle broken at ${fmtTime(entry.t)}: ${entry.cycleText} — victim ${entry.agent} (${entry.kind})`
    : 'no wait-for cycle broken';
  if (el.textContent === text) return;
  el.textContent = text;
  el.classList.toggle('hint', !entry);
  el.classList.toggle('broken', Boolean(entry));
  el.dataset.cycle = entry ? entry.cycle.join(' ') : '';
}

/** The names of `cycle`'s sessions, via `agentName(session)`, as "a → b → a". */
function namedCycle(cycle, agentName) {
  return cycleText(cycle, (s) => `${agentName(s)} (${s})`);
}

/** The row saying how many rows were left out. */
const more = (n, cols) => (n > ROWS ? `<tr><td colspan="${cols}" class="hint">+${n - ROWS} more</td></tr>` : '');

function renderLog(entries) {
  const shown = entries.slice(-LOG_SHOWN).reverse();
  html(
    'log',
    shown
      .map(
        (e) =>
          `<div class="ln${e.explain ? ' why' : ''}${state.selected === e.i ? ' selected' : ''}" data-i="${e.i}">` +
          `<span class="t">${fmtTime(e.t)}</span><span class="a" title="${escapeHtml(e.agent)}">${escapeHtml(e.agent)}</span>` +
          `<span class="k k-${e.kind}">${e.kind}</span><span class="x" title="${escapeHtml(e.text)}">${escapeHtml(e.text)}</span></div>`,
      )
      .join(''),
  );
}

let timeBase = null; // server ms shown as 0.000 s
const fmtTime = (t) => `${((t - (timeBase ?? 0)) / 1000).toFixed(3)}s`;

// ---- live -------------------------------------------------------------------------------------

const live = {
  attempt: 0,
  known: { leases: new Map(), tickets: new Map() },
  dirty: false,
  reading: false,
  newLog: false, // the stream was answered by another log: its first gap says so, not a loss
};

function logEntry(entry) {
  entry.i = state.log.length ? state.log[state.log.length - 1].i + 1 : 0;
  state.log.push(entry);
  if (state.log.length > 4000) state.log.splice(0, state.log.length - 2000);
}

function agentOf(session) {
  const s = state.overview?.snapshot.sessions.find((x) => x.session_id === session);
  return s ? s.agent_id : `session ${session}`;
}

function onEvent(id, kind, data) {
  state.lastEventId = id;
  // Immediate grants and releases are logged from the overview's changes (readOverview).
  if (kind === 'ACQUIRED' || kind === 'RELEASED') return;
  let e;
  try {
    e = JSON.parse(data);
  } catch {
    return;
  }
  const t = state.overview?.now ?? 0;
  const agent = agentOf(e.session);
  const cycle = kind === 'DIED' && e.cycle?.length ? namedCycle(e.cycle, agentOf) : null;
  const text = {
    GRANTED: () => `ticket ${e.ticket}: ${e.leases.map((l) => `${l.predicate} ${l.resource}`).join(', ')}`,
    WAIT_TIMEOUT: () => `ticket ${e.ticket} gave up waiting`,
    DIED: () =>
      cycle
        ? `ticket ${e.ticket} withdrawn to break the wait-for cycle ${cycle}, retry after ${e.retry_after_ms} ms`
        : `ticket ${e.ticket} withdrawn, retry after ${e.retry_after_ms} ms`,
    LEASE_EXPIRED: () => `lease ${e.lease} expired`,
    WOUNDED: () =>
      `wounded by session ${e.by}: lost ${e.lost_leases.length} leases, retry after ${e.retry_after_ms} ms`,
    SESSION_CLOSED: () => `closed (${e.reason})`,
  }[kind];
  const entry = { t, kind, agent, text: text ? text() : data, id };
  if (cycle) {
    Object.assign(entry, { cycle: e.cycle, cycleText: cycle });
    state.lastCycle = entry;
  }
  logEntry(entry);
  live.dirty = true;
}

/** Reads the overview, and logs the grants and waits that appeared since the last read. */
async function readOverview() {
  if (live.reading) return;
  live.reading = true;
  try {
    const o = await getJson(`${nsPath()}/overview`);
    timeBase ??= o.now;
    const seen = live.known;
    const next = { leases: new Map(), tickets: new Map() };
    for (const l of o.snapshot.leases) {
      next.leases.set(l.lease_id, l);
      if (state.overview && !seen.leases.has(l.lease_id)) {
        logEntry({
          t: l.acquired_at,
          kind: 'GRANTED',
          agent: l.agent_id,
          text: `${l.predicate} ${l.resource} (lease ${l.lease_id}, fence ${l.fence})`,
        });
      }
    }
    for (const t of o.snapshot.tickets) {
      next.tickets.set(t.ticket, t);
      if (state.overview && !seen.tickets.has(t.ticket)) {
        logEntry({
          t: o.now,
          kind: 'WAIT',
          agent: t.agent_id,
          text: `ticket ${t.ticket}: ${t.intents.map((i) => `${i.predicate} ${i.resource}`).join(', ')}`,
        });
      }
    }
    for (const [id, l] of seen.leases) {
      if (!next.leases.has(id))
        logEntry({
          t: o.now,
          kind: 'RELEASE',
          agent: l.agent_id,
          text: `lease ${id} ended: ${l.predicate} ${l.resource}`,
        });
    }
    live.known = next;
    state.overview = o;
    render(o.snapshot, o.now);
    renderCycle(state.lastCycle);
    renderLog(state.log);
    $('vclock').textContent = `t = ${fmtTime(o.now)} · entry ${o.index}`;
    if (state.status !== 'live') setStatus('live', `live · ${state.ns}`);
    window.klock.ready = true;
  } finally {
    live.reading = false;
  }
}

function backoff() {
  const base = Math.min(5000, 250 * 2 ** live.attempt);
  live.attempt++;
  return base / 2 + Math.random() * (base / 2);
}

/** Follows the watch stream until it ends or fails; resolves then. */
async function follow() {
  const log = state.cursorLog ? `?log=${encodeURIComponent(state.cursorLog)}` : '';
  const res = await fetch(api(`${nsPath()}/watch${log}`), {
    headers: headers({ Accept: 'text/event-stream', 'Last-Event-ID': state.lastEventId }),
    cache: 'no-store',
  });
  if (!res.ok) throw httpError(res, await res.text());
  const answered = res.headers.get('klock-log');
  if (answered && state.cursorLog && answered !== state.cursorLog) {
    // Another log (an in-memory server restarted): the server reads it from its start.
    logEntry({
      t: state.overview?.now ?? 0,
      kind: 'RESTART',
      agent: 'server',
      text: 'the server started over (a new log): its events are read from the start',
    });
    live.newLog = true;
  }
  if (answered) state.cursorLog = answered;
  live.attempt = 0;
  setStatus('live', `live · ${state.ns}`);
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  let ev = { id: null, kind: 'message', data: [] };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let nl;
    while ((nl = buffer.indexOf('\n')) >= 0) {
      const line = buffer.slice(0, nl).replace(/\r$/, '');
      buffer = buffer.slice(nl + 1);
      if (line === '') {
        if (ev.data.length) {
          if (ev.kind === 'gap' && live.newLog) {
            live.newLog = false; // the new log's start, said above
          } else if (ev.kind === 'gap') {
            logEntry({
              t: state.overview?.now ?? 0,
              kind: 'RESTART',
              agent: 'server',
              text: 'some events were dropped before the page read them',
            });
            live.dirty = true;
          } else if (ev.id) onEvent(ev.id, ev.kind, ev.data.join('\n'));
        }
        ev = { id: null, kind: 'message', data: [] };
      } else if (line.startsWith(':')) {
        // a keep-alive comment
      } else {
        const at = line.indexOf(':');
        const field = at < 0 ? line : line.slice(0, at);
        const val = at < 0 ? '' : line.slice(at + 1).replace(/^ /, '');
        if (field === 'id') ev.id = val;
        else if (field === 'event') ev.kind = val;
        else if (field === 'data') ev.data.push(val);
      }
    }
  }
}

async function runLive() {
  setInterval(() => {
    if (state.status === 'live') readOverview().catch(() => {});
  }, POLL_MS);
  setInterval(() => {
    if (live.dirty && state.status === 'live') {
      live.dirty = false;
      readOverview().catch(() => {});
    }
  }, 100);
  for (;;) {
    try {
      await readOverview();
      await follow();
      throw new Error('the stream ended');
    } catch (e) {
      if (e.status === 401 || e.status === 403 || e.status === 400) {
        setStatus('error', e.message);
        window.klock.ready = true;
        return;
      }
      const wait = backoff();
      setStatus('reconnecting', `reconnecting in ${(wait / 1000).toFixed(1)} s (${e.message})`);
      await new Promise((r) => setTimeout(r, wait));
    }
  }
}

// ---- replay -----------------------------------------------------------------------------------

const replay = {
  wasm: null,
  meta: null,
  current: null, // the Replayer shown
  checkpoints: [], // Replayer copies at positions 0, CHECKPOINT, 2·CHECKPOINT, ...
  times: null,
  indexes: null,
  entries: [], // the namespace's verdicts and events: {i, step, t, kind, agent, text, explain?}
  playing: false,
  speed: 100,
  vtime: 0,
  frames: [],
};

function seek(position) {
  const r = replay;
  position = Math.max(0, Math.min(position, r.times.length));
  if (position < r.current.position) {
    const base = r.checkpoints[Math.floor(position / CHECKPOINT)];
    r.current.free();
    r.current = base.clone();
  }
  r.current.run(position, false);
  showReplay();
}

function showReplay() {
  const r = replay;
  const pos = r.current.position;
  const snap = cut(JSON.parse(r.current.snapshot()));
  const now = r.current.now();
  const t = performance.now();
  const full = !r.playing || t - (r.lastFull ?? 0) >= SLOW_RENDER_MS || pos >= r.times.length;
  if (full) r.lastFull = t;
  render(snap, now, full);
  $('scrubber').value = String(pos);
  const index = pos === 0 ? r.meta.start.index : r.indexes[pos - 1];
  $('where').textContent =
    `step ${pos.toLocaleString('en')} / ${r.times.length.toLocaleString('en')} · entry ${index} · ${fmtTime(now)}`;
  $('vclock').textContent = `t = ${fmtTime(now)}`;
  $('hash').textContent = r.current.stateHash();
  if (!full) return;
  // The verdicts up to here.
  let hi = r.entries.length;
  let lo = 0;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (r.entries[mid].step < pos) lo = mid + 1;
    else hi = mid;
  }
  renderLog(r.entries.slice(Math.max(0, lo - LOG_SHOWN), lo));
  let broken = lo - 1;
  while (broken >= 0 && !r.entries[broken].cycle) broken--;
  renderCycle(broken >= 0 ? r.entries[broken] : null);
}

/** The first pass: the namespace's verdicts and events, and the kernel copies for seeking. */
function record() {
  const r = replay;
  const ns = state.ns;
  const nsOf = new Map();
  const agents = new Map();
  for (const s of r.meta.start.state.sessions) {
    nsOf.set(s.session_id, s.namespace);
    agents.set(s.session_id, s.agent_id);
  }
  const pass = r.checkpoints[0].clone();
  const mine = (session) => nsOf.get(session) === ns;
  const agentName = (session) => agents.get(session) ?? `session ${session}`;
  const push = (e) => {
    e.i = r.entries.length;
    r.entries.push(e);
  };
  const event = (step, t, ev) => {
    // An immediate grant or a release is logged from its call's answer, not again here.
    if (!mine(ev.session) || ev.event === 'ACQUIRED' || ev.event === 'RELEASED') return;
    const agent = agents.get(ev.session) ?? `session ${ev.session}`;
    const cycle = ev.event === 'DIED' && ev.cycle?.length ? namedCycle(ev.cycle, agentName) : null;
    const text = {
      GRANTED: () => `ticket ${ev.ticket}: ${ev.leases.map((l) => `${l.predicate} ${l.resource}`).join(', ')}`,
      WAIT_TIMEOUT: () => `ticket ${ev.ticket} gave up waiting`,
      DIED: () =>
        cycle
          ? `ticket ${ev.ticket} withdrawn to break the wait-for cycle ${cycle}, retry after ${ev.retry_after_ms} ms`
          : `ticket ${ev.ticket} withdrawn, retry after ${ev.retry_after_ms} ms`,
      LEASE_EXPIRED: () => `lease ${ev.lease} expired`,
      WOUNDED: () =>
        `wounded by session ${ev.by}: lost ${ev.lost_leases.length} leases, retry after ${ev.retry_after_ms} ms`,
      SESSION_CLOSED: () => `closed (${ev.reason})`,
    }[ev.event];
    push({
      step,
      t,
      kind: ev.event,
      agent,
      text: text ? text() : ev.event,
      ...(cycle && { cycle: ev.cycle, cycleText: cycle }),
    });
  };
  for (let at = 0; at < r.times.length; at += CHECKPOINT) {
    if (at > 0) r.checkpoints.push(pass.clone());
    const steps = JSON.parse(pass.run(Math.min(at + CHECKPOINT, r.times.length), true));
    steps.forEach((s, k) => {
      const step = at + k;
      for (const ev of s.settled) event(step, s.now, ev);
      for (const call of s.calls) {
        const c = call.command;
        const ok = call.answer.ok;
        if (c.op === 'open' || c.op === 'resume') {
          if (ok?.session) {
            nsOf.set(ok.session.session_id, ok.session.namespace);
            agents.set(ok.session.session_id, ok.session.agent_id);
            if (ok.session.namespace === ns)
              push({
                step,
                t: s.now,
                kind: c.op.toUpperCase(),
                agent: ok.session.agent_id,
                text: `session ${ok.session.session_id}, priority ${ok.session.priority}`,
              });
          }
        } else if (c.op === 'acquire' && mine(c.session)) {
          const agent = agents.get(c.session);
          if (ok) {
            const v = ok.verdict;
            const what = c.intents.join(', ');
            const cycle = v.verdict === 'DIE' && v.cycle?.length ? namedCycle(v.cycle, agentName) : null;
            const text =
              v.verdict === 'GRANTED'
                ? `${what}`
                : v.verdict === 'WAIT'
                  ? `${what} · ticket ${v.ticket}, behind ${v.held_by.map((b) => b.agent_id).join(', ')}`
                  : cycle
                    ? `${what} · died breaking the wait-for cycle ${cycle}; retry after ${v.retry_after_ms} ms`
                    : `${what} · held by ${v.held_by.map((b) => b.agent_id).join(', ')}; retry after ${v.retry_after_ms} ms`;
            push({
              step,
              t: s.now,
              kind: v.verdict,
              agent,
              text,
              explain: v.verdict !== 'GRANTED' ? { command: c, verdict: v, cycle } : null,
              ...(cycle && { cycle: v.cycle, cycleText: cycle }),
            });
          } else {
            push({
              step,
              t: s.now,
              kind: 'ERROR',
              agent,
              text: `${call.answer.error.name}: ${call.answer.error.message}`,
            });
          }
        } else if ((c.op === 'close' || c.op === 'release_all') && mine(c.session) && ok) {
          push({
            step,
            t: s.now,
            kind: 'RELEASE',
            agent: agents.get(c.session),
            text: c.op === 'close' ? 'closed the session' : `released ${ok.count} leases`,
          });
        }
        for (const ev of call.events) event(step, s.now, ev);
      }
    });
  }
  pass.free();
}

/** Explains the DIE or WAIT verdict of log entry `i` from the replayed state at its step. */
function explain(i) {
  const source = state.mode === 'replay' ? replay.entries : state.log;
  const e = source.find((x) => x.i === i);
  if (!e) return;
  state.selected = i;
  if (!e.explain) {
    $('detail-name').textContent = '';
    $('detail').innerHTML = `<p class="hint">${escapeHtml(e.kind)}: ${escapeHtml(e.text)}</p><p class="hint">${
      state.mode === 'replay'
        ? 'Only DIE and WAIT verdicts have a reason to explain.'
        : 'Live, DIE and WAIT answers are not streamed: replay the range to explain them.'
    }</p>`;
    return;
  }
  seek(e.step + 1); // the state right after the verdict: priorities as the kernel used them
  const snap = JSON.parse(replay.current.snapshot());
  const prio = new Map(snap.sessions.map((s) => [s.session_id, s.priority]));
  const { command: c, verdict: v } = e.explain;
  const policy = replay.meta.config.policy;
  const mineP = prio.get(c.session);
  const wait = c.options?.wait !== false && c.options?.wait_timeout_ms !== 0;
  const rows = v.held_by
    .map((b) => {
      const p = prio.get(b.session_id);
      const rel = p === undefined ? '?' : p < mineP ? 'older' : 'younger';
      return `<tr><td>${escapeHtml(b.agent_id)}</td><td>${b.session_id}</td><td>${p ?? '–'}</td><td>${rel}</td><td>${b.intents
        .map((x) => `<span class="chip p-${x.predicate}">${x.predicate} ${escapeHtml(x.resource)}</span>`)
        .join(' ')}</td></tr>`;
    })
    .join('');
  const older = v.held_by.filter((b) => prio.get(b.session_id) < mineP);
  let why;
  if (!wait) {
    why = `The request asked not to wait (wait: false or wait_timeout_ms: 0), and it was blocked: every policy answers DIE (a failed try-lock).`;
  } else if (policy === 'wait_die') {
    why =
      v.verdict === 'WAIT'
        ? `Wait-Die: the requester (priority ${mineP}) is older than every blocker, so it may wait for them; waiting only for younger units cannot close a cycle.`
        : `Wait-Die: ${older.map((b) => `${b.agent_id} (priority ${prio.get(b.session_id)})`).join(', ')} ${older.length > 1 ? 'are' : 'is'} older than the requester (priority ${mineP}). A younger unit never waits for an older one (that could close a wait-for cycle), so it dies and retries after ${v.retry_after_ms} ms, keeping its priority: it becomes the oldest once the older units end.`;
  } else if (policy === 'detect') {
    why =
      v.verdict === 'WAIT'
        ? `Detect: everyone waits, whatever its age; this request closed no cycle in the wait-for graph, so nobody died.`
        : `Detect: waiting would have closed the wait-for cycle ${e.explain.cycle}. Its youngest unit of work (the requester, priority ${mineP}) dies and retries after ${v.retry_after_ms} ms, keeping its priority: it becomes the oldest once the older units end.`;
  } else if (policy === 'wound_wait') {
    why =
      v.verdict === 'WAIT'
        ? `Wound-Wait: the requester (priority ${mineP}) wounded any younger blockers and waits only for the older ones listed here.`
        : `Wound-Wait: blocked and not allowed to wait, so it dies without wounding anyone.`;
  } else {
    why =
      v.verdict === 'WAIT'
        ? `Lanes: the manifest was queued as one FIFO ticket (lane ${v.ticket}); it is served when every earlier conflicting lane is done.`
        : `Lanes: blocked and not allowed to wait, so it dies.`;
  }
  $('detail-name').textContent = `${e.kind} · entry ${replay.indexes[e.step]}`;
  $('detail').innerHTML =
    `<h4>request</h4><p><b>${escapeHtml(e.agent)}</b> (session ${c.session}, priority ${mineP}) asked for ${c.intents
      .map((x) => `<span class="chip">${escapeHtml(x)}</span>`)
      .join(' ')} at ${fmtTime(e.t)}</p>` +
    `<h4>blocked by</h4><table><tr><th>agent</th><th>session</th><th>priority</th><th></th><th>conflicting intents</th></tr>${rows}</table>` +
    `<h4>why ${e.kind} (${policy})</h4><p class="why-text">${escapeHtml(why)}</p>`;
}

function frame(ts) {
  const r = replay;
  r.frames.push(ts);
  while (r.frames.length > 2 && ts - r.frames[0] > 1000) r.frames.shift();
  state.fps = r.frames.length > 1 ? ((r.frames.length - 1) * 1000) / (ts - r.frames[0]) : 0;
  if (r.playing) {
    const pos = r.current.position;
    if (pos >= r.times.length) {
      r.playing = false;
      $('play').textContent = 'Play';
    } else {
      let to;
      const t0 = performance.now();
      if (r.speed === 'max') {
        const t0 = performance.now();
        to = pos;
        while (to < r.times.length && performance.now() - t0 < STEP_BUDGET_MS) {
          to = Math.min(r.times.length, to + 500);
          r.current.run(to, false);
        }
      } else {
        r.vtime += (ts - (r.lastTs ?? ts)) * r.speed;
        to = pos;
        while (to < r.times.length && r.times[to] <= r.vtime) to++;
        if (to === pos && pos < r.times.length && r.times[pos] - r.vtime > 5000) r.vtime = r.times[pos]; // skip idle gaps
        r.current.run(to, false);
      }
      const t1 = performance.now();
      showReplay();
      state.stepMs = t1 - t0;
      state.renderMs = performance.now() - t1;
    }
  }
  r.lastTs = ts;
  requestAnimationFrame(frame);
}

async function runReplay() {
  setStatus('loading', 'loading the wasm kernel');
  let wasm;
  try {
    wasm = await import('./pkg/klock_wasm.js');
    await wasm.default();
  } catch (e) {
    setStatus('error', `the wasm package is missing (run bash bindings/wasm/build.sh): ${e.message}`);
    window.klock.ready = true;
    return;
  }
  setStatus('loading', 'loading the history');
  const q = new URLSearchParams();
  if (state.range.from) q.set('from', state.range.from);
  if (state.range.to) q.set('to', state.range.to);
  let text;
  try {
    const res = await fetch(api(`${nsPath()}/history${q.size ? `?${q}` : ''}`), {
      headers: headers(),
      cache: 'no-store',
    });
    text = await res.text();
    if (!res.ok) throw httpError(res, text);
  } catch (e) {
    setStatus('error', e.message);
    window.klock.ready = true;
    return;
  }
  const r = replay;
  r.meta = JSON.parse(text);
  delete r.meta.steps; // the Replayer keeps them
  r.checkpoints = [new wasm.Replayer(text)];
  text = null;
  r.current = r.checkpoints[0].clone();
  r.times = r.checkpoints[0].times();
  r.indexes = r.checkpoints[0].indexes();
  timeBase = r.meta.start.now;
  setStatus('loading', `replaying ${r.times.length.toLocaleString('en')} steps once`);
  await new Promise((res) => setTimeout(res, 0));
  record();
  $('scrubber').max = String(r.times.length);
  $('scrubber').addEventListener('input', () => {
    r.playing = false;
    $('play').textContent = 'Play';
    seek(Number($('scrubber').value));
  });
  $('play').addEventListener('click', () => {
    if (r.current.position >= r.times.length) seek(0);
    r.playing = !r.playing;
    r.vtime = r.current.position ? r.times[r.current.position - 1] : r.meta.start.now;
    $('play').textContent = r.playing ? 'Pause' : 'Play';
  });
  $('speed').addEventListener('change', () => {
    r.speed = $('speed').value === 'max' ? 'max' : Number($('speed').value);
  });
  document.addEventListener('keydown', (e) => {
    if (e.key === ' ' && e.target === document.body) {
      e.preventDefault();
      $('play').click();
    }
  });
  seek(r.times.length);
  setStatus('replay', `replay · ${state.ns} · entries ${r.meta.start.index + 1}..${r.meta.end.index}`);
  Object.assign(window.klock, {
    replay: {
      length: r.times.length,
      indexes: Array.from(r.indexes),
      meta: { start: { index: r.meta.start.index, hash: r.meta.start.hash }, end: r.meta.end },
      seek,
      position: () => r.current.position,
      hash: () => r.current.stateHash(),
      /** The replayed state hash after log entry `index` (a step of the export, or its start). */
      hashAt(index) {
        const at = index === r.meta.start.index ? 0 : r.indexes.indexOf(index) + 1;
        if (at === 0 && index !== r.meta.start.index) return null;
        seek(at);
        return r.current.stateHash();
      },
      entries: () => r.entries.length,
      play(speed) {
        $('speed').value = String(speed);
        $('speed').dispatchEvent(new Event('change'));
        if (!r.playing) $('play').click();
      },
      playing: () => r.playing,
    },
  });
  window.klock.ready = true;
  requestAnimationFrame(frame);
}

export async function start(params) {
  settings(params);
  layout();
  if (!state.server) {
    setStatus('error', 'give a server URL (and a token if the server asks for one)');
    window.klock.ready = true;
    return;
  }
  if (state.mode === 'replay') await runReplay();
  else runLive();
}
