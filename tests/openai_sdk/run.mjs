// Starts `dspark serve` on the bundled pair on a free loopback port, waits for /health, runs
// conformance.mjs against it, and stops the server. The ctest entry openai_sdk_conformance (label
// e2e) runs this; by hand:
//
//   node tests/openai_sdk/run.mjs [path/to/dspark]        # default: build/bin/dspark
//
// Exit status: conformance.mjs's (1 when a check failed), or 1 when the server did not start; the
// server's log is printed when anything failed.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '../..');
const bin = path.resolve(process.argv[2] ?? process.env.DSPARK_BIN ?? path.join(root, 'build/bin/dspark'));
const models = path.join(root, 'models');

function fail(msg) {
  console.log(`FAIL setup: ${msg}`);
  process.exit(1);
}

if (!existsSync(path.join(here, 'node_modules/openai/package.json'))) {
  fail(`${path.join(here, 'node_modules')} has no openai package: run scripts/install-deps.sh ` +
       '(it runs npm ci --prefix tests/openai_sdk)');
}
if (!existsSync(bin)) fail(`no dspark binary at ${bin}`);

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

let server = null;
let log = '';

function startServer(port) {
  const args = ['serve', '-m', path.join(models, 'ref-target.gguf'), '--spec-type', 'draft-simple',
    '-md', path.join(models, 'ref-draft.gguf'), '--host', '127.0.0.1', '--port', String(port), '--parallel', '4'];
  const child = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  const keep = (d) => { log = (log + d).slice(-20000); };
  child.stdout.on('data', keep);
  child.stderr.on('data', keep);
  child.exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  return child;
}

async function healthy(url, child, seconds) {
  let done = false;
  child.exited.then(() => { done = true; });
  const end = Date.now() + seconds * 1000;
  while (!done && Date.now() < end) {
    try {
      const r = await fetch(`${url}/health`);
      if (r.status === 200) return true;
    } catch { /* not listening yet */ }
    await sleep(100);
  }
  return false;
}

async function stopServer() {
  if (!server || server.exitCode !== null || server.signalCode !== null) return;
  server.kill('SIGTERM');
  const t = sleep(5000).then(() => 'timeout');
  if ((await Promise.race([server.exited, t])) === 'timeout') {
    server.kill('SIGKILL');
    await server.exited;
  }
}

for (const sig of ['SIGINT', 'SIGTERM']) {
  process.on(sig, async () => { await stopServer(); process.exit(1); });
}

// A port picked free can be taken before the server binds it: try a few.
let url = null;
for (let attempt = 0; attempt < 3 && !url; ++attempt) {
  const port = await freePort();
  server = startServer(port);
  if (await healthy(`http://127.0.0.1:${port}`, server, 60)) url = `http://127.0.0.1:${port}`;
  else await stopServer();
}
if (!url) {
  console.log(log);
  fail('dspark serve did not become healthy (log above)');
}

const t0 = Date.now();
const child = spawn(process.execPath, [path.join(here, 'conformance.mjs')], {
  stdio: 'inherit', env: { ...process.env, DSPARK_URL: url },
});
const { code, signal } = await new Promise((resolve) => child.on('exit', (c, s) => resolve({ code: c, signal: s })));
const serverDied = server.exitCode !== null || server.signalCode !== null;
await stopServer();
console.log(`conformance: ${((Date.now() - t0) / 1000).toFixed(1)} s against ${url}`);
if (code !== 0 || serverDied) {
  if (serverDied) console.log('FAIL server: dspark serve exited during the run');
  console.log(`---- dspark serve log (last 20 kB) ----\n${log}`);
}
process.exit(code === 0 && !serverDied ? 0 : (code || 1));
