// The time from a fresh `connect()` to the first grant of its first lease (bench/first_grant.sh
// runs it). Usage: node first_grant.cjs CLIENT_JS URL N: N fresh clients, one after the other,
// each connect + open + acquire timed; prints the median and quartiles in ms.
const [clientJs, url, n] = process.argv.slice(2);
const { connect } = require(clientJs);

(async () => {
  const times = [];
  for (let i = 0; i < Number(n); i++) {
    const start = performance.now();
    const k = connect(url);
    const s = await k.session('m');
    const lease = await s.lease(['MUTATES FILE:/m']);
    times.push(performance.now() - start);
    await lease.release();
    await s.close();
    await k.close();
  }
  times.sort((a, b) => a - b);
  const at = (p) => times[Math.floor(p * (times.length - 1))].toFixed(2);
  console.log(`n=${n} median ${at(0.5)} ms (q1 ${at(0.25)}, q3 ${at(0.75)})`);
})();
