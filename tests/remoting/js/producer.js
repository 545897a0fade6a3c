'use strict';
// Sends messages with ali-ons' Producer and prints one JSON line per send result.
//
// Options (one JSON argv): {
//   "nameSrv": "127.0.0.1:10911", "producerGroup": "PG", "topic": "T",
//   "instanceName": "p1" (optional), "clientOptions": {...} (more ali-ons options),
//   "messages": [{"body": "text", "tags": "a", "keys": ["k1"], "delayTimeLevel": 3,
//                 "properties": {"name": "value"}}, ...]
//   or "count": N with "template": {...} (body gets "-<i>" appended)
// }
// Output: {"event":"sent","index":i,"msgId":...,"queueId":...,"queueOffset":...,
//          "brokerName":...,"sendStatus":...} per message, then {"event":"done","count":n}.
const { Producer, Message } = require('ali-ons');
const { options, emit, logger, httpclient, fail } = require('./common');

function buildMessage(topic, spec) {
  const msg = new Message(topic, spec.body || '');
  // new Message(topic, body) sets TAGS to null, which messageProperties2String writes as the
  // text "null": leave the property out unless a tag is given.
  delete msg.properties.TAGS;
  if (spec.tags) msg.tags = spec.tags;
  if (spec.keys && spec.keys.length) msg.keys = spec.keys;
  if (spec.delayTimeLevel) msg.delayTimeLevel = spec.delayTimeLevel;
  for (const [name, value] of Object.entries(spec.properties || {})) msg.properties[name] = String(value);
  if (spec.flag) msg.flag = spec.flag;
  return msg;
}

function specs(opts) {
  if (opts.messages) return opts.messages;
  const out = [];
  for (let i = 0; i < opts.count; i++) {
    const t = opts.template || {};
    out.push(Object.assign({}, t, { body: `${t.body || 'message'}-${i}` }));
  }
  return out;
}

async function main() {
  const opts = options();
  const producer = new Producer({
    httpclient,
    logger,
    nameSrv: opts.nameSrv,
    producerGroup: opts.producerGroup || 'sparkmq_test_producer',
    instanceName: opts.instanceName,
    ...opts.clientOptions,
  });
  producer.on('error', err => console.error('[producer error]', err && err.message));
  await producer.ready();
  const list = specs(opts);
  for (let i = 0; i < list.length; i++) {
    const result = await producer.send(buildMessage(opts.topic, list[i]));
    emit({
      event: 'sent',
      index: i,
      msgId: result.msgId,
      queueId: Number(result.messageQueue.queueId), // ali-ons keeps the header string
      brokerName: result.messageQueue.brokerName,
      queueOffset: result.queueOffset,
      sendStatus: result.sendStatus,
    });
  }
  emit({ event: 'done', count: list.length });
  await producer.close();
  process.exit(0);
}

main().catch(fail);
