'use strict';
// Shared by the drivers: option parsing, JSON-line output, a quiet logger (warnings and errors
// go to stderr, stdout carries only JSON lines).

function options() {
  if (process.argv.length !== 3) {
    process.stderr.write(`usage: node ${process.argv[1]} '<options as one JSON object>'\n`);
    process.exit(64);
  }
  return JSON.parse(process.argv[2]);
}

function emit(doc) {
  process.stdout.write(JSON.stringify(doc) + '\n');
}

const logger = {
  info() {},
  debug() {},
  warn(...args) { console.error('[ali-ons warn]', ...args); },
  error(...args) { console.error('[ali-ons error]', ...args); },
};

// ali-ons asserts an `httpclient` even when `nameSrv` is given; it is never called then.
const httpclient = {
  request() { throw new Error('httpclient is not used: nameSrv is set'); },
};

function fail(err) {
  emit({ event: 'error', name: err && err.name, code: err && err.code, message: String(err && err.message || err) });
  process.exit(1);
}

module.exports = { options, emit, logger, httpclient, fail };
