// The wait-for graph of a kernel snapshot, for display (docs/SPEC.md §6.1): an edge from each
// waiting session to every other session that blocks one of its tickets, by holding a
// conflicting lease on an overlapping resource or owning a conflicting intent of an earlier
// ticket there (§6). Overlap is §3 (same namespace and TYPE, one path a segment-prefix of the
// other); conflicts are §4's matrix. The kernel names the same blockers in each WAIT verdict's
// held_by, but the live view never sees WAIT verdicts and a ticket's blockers shrink as they
// finish, so the page derives the current edges from the state it shows, as
// core/examples/common/invariants.rs does to check the kernel. dashboard/test/waitfor.test.mjs
// holds this to the kernel: after every WAIT verdict of seeded random runs, the edges of the
// new ticket must equal its held_by.
//
// Input: a snapshot in snake_case (the server's overview, the Replayer's snapshot()). Output of
// `waitFor`: [{ from, to, ticket }] (session ids; the waiter's first ticket that `to` blocks),
// by `from` then `to`. Only the display uses it; nothing is decided from it.

/** §4: the pairs that are compatible (symmetric); every other pair conflicts. */
const COMPATIBLE = new Set([
  'PROVIDES CONSUMES',
  'PROVIDES DEPENDS_ON',
  'CONSUMES CONSUMES',
  'CONSUMES DEPENDS_ON',
  'DEPENDS_ON DEPENDS_ON',
]);

export function conflicts(a, b) {
  return !COMPATIBLE.has(`${a} ${b}`) && !COMPATIBLE.has(`${b} ${a}`);
}

/** §3: whether canonical resources `a` and `b` (`TYPE:/path`) overlap. */
export function overlaps(a, b) {
  const [ta, pa] = split(a);
  const [tb, pb] = split(b);
  return ta === tb && (within(pa, pb) || within(pb, pa));
}

function split(resource) {
  const at = resource.indexOf(':');
  return [resource.slice(0, at), resource.slice(at + 1)];
}

/** `inner` is `outer` or below it, segment-wise. */
function within(inner, outer) {
  return inner === outer || outer === '/' || inner.startsWith(`${outer}/`);
}

/** The sessions blocking waiting ticket `t` of `snapshot`, by ascending session id. */
export function blockersOf(snapshot, t) {
  const namespace = new Map(snapshot.sessions.map((s) => [s.session_id, s.namespace]));
  const ns = (session) => namespace.get(session) ?? '?';
  const blocks = (session, predicate, resource) =>
    session !== t.session_id &&
    ns(session) === ns(t.session_id) &&
    t.intents.some((i) => conflicts(i.predicate, predicate) && overlaps(i.resource, resource));
  const blockers = new Set();
  for (const l of snapshot.leases) {
    if (blocks(l.session_id, l.predicate, l.resource)) blockers.add(l.session_id);
  }
  for (const other of snapshot.tickets) {
    if (other.ticket < t.ticket && other.intents.some((i) => blocks(other.session_id, i.predicate, i.resource))) {
      blockers.add(other.session_id);
    }
  }
  return [...blockers].sort((a, b) => a - b);
}

/** The wait-for edges of `snapshot` (see the contract above). */
export function waitFor(snapshot) {
  const tickets = [...snapshot.tickets].sort((a, b) => a.ticket - b.ticket);
  const edges = new Map(); // "from to" -> edge
  for (const t of tickets) {
    for (const to of blockersOf(snapshot, t)) {
      const key = `${t.session_id} ${to}`;
      if (!edges.has(key)) edges.set(key, { from: t.session_id, to, ticket: t.ticket });
    }
  }
  return [...edges.values()].sort((a, b) => a.from - b.from || a.to - b.to);
}

/** `cycle` (session ids, the victim first, as the kernel names it) as "a → b → a". */
export function cycleText(cycle, name) {
  return [...cycle, cycle[0]].map(name).join(' → ');
}
