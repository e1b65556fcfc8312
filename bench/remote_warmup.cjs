'use strict';
// A young client's cost per operation by operation index (bench/remote.md, "Node at 16 client
// processes: the first thousand operations of a process"): one client of `--client`
// (node/client.js) against `klock serve` at URL, `withLease` on its own resource in a loop,
// the process's CPU (process.cpuUsage) per operation over buckets of operation indexes.
// remote_warmup.py is the same loop for the Python client.
//
//   node bench/remote_warmup.cjs URL [--client node/client.js]
//
// Prints one line: "0-50: us  50-100: us  ...  3200-6400: us".
const path = require('node:path');

const url = process.argv[2];
const i = process.argv.indexOf('--client');
const clientPath = path.resolve(i >= 0 ? process.argv[i + 1] : 'node/client.js');
const EDGES = [0, 50, 100, 200, 400, 800, 1600, 3200, 6400];

(async () => {
  const { connect } = require(clientPath);
  const k = connect(url);
  const s = await k.session(`warmup-${process.pid}`);
  const intent = `MUTATES FILE:/bench/warmup-${process.pid}`;
  const out = [];
  let n = 0;
  for (let e = 1; e < EDGES.length; e++) {
    const cpu0 = process.cpuUsage();
    for (; n < EDGES[e]; n++) await s.withLease(intent, async () => {});
    const cpu = process.cpuUsage(cpu0);
    out.push(`${EDGES[e - 1]}-${EDGES[e]}: ${((cpu.user + cpu.system) / (EDGES[e] - EDGES[e - 1])).toFixed(0)}`);
  }
  console.log(out.join('  '));
  await s.close();
  await k.close();
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
