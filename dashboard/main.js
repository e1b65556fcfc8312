// The dashboard's entry point: the simulated swarm (app.js) by default, or the live view and
// replay of a real `klock serve` (remote.js) when the URL names one:
//   ?live                              live view of the server that serves the page
//   ?server=http://HOST:PORT&ns=NS     live view of that server ("mode=replay" to replay it)
// A bearer token comes from the URL fragment (#token=..., never sent to any server) or the
// form remote.js shows; see remote.js.

const params = new URLSearchParams(location.search);
const remote = ['live', 'replay', 'server', 'mode'].some((k) => params.has(k));
if (remote) {
  const { start } = await import('./remote.js');
  await start(params);
} else {
  await import('./app.js');
}
