'use strict';
// A push consumer (ali-ons' Consumer) that prints one JSON line per message it receives.
//
// Options (one JSON argv): {
//   "nameSrv": "127.0.0.1:10911", "consumerGroup": "G", "topic": "T", "subExpression": "*",
//   "instanceName": "c1" (distinct per consumer of one group),
//   "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET" (default), "clientOptions": {...},
//   "fail": {"<body>": n}   fail the message with that body its first n deliveries,
//   "expect": N             exit once N messages were consumed successfully,
//   "timeoutMs": 60000      exit with status 2 if that has not happened by then
// }
// Output: {"event":"ready"} once subscribed, {"event":"queues","queues":[ids]} whenever a
// rebalance changes the topic's queues it owns, {"event":"message","msgId",...,"ok":bool} per
// delivery, then {"event":"done","consumed":n} (or {"event":"timeout",...}).
const { Consumer } = require('ali-ons');
const { options, emit, logger, httpclient, fail } = require('./common');

async function main() {
  const opts = options();
  const consumer = new Consumer({
    httpclient,
    logger,
    nameSrv: opts.nameSrv,
    consumerGroup: opts.consumerGroup,
    instanceName: opts.instanceName,
    consumeFromWhere: opts.consumeFromWhere || 'CONSUME_FROM_FIRST_OFFSET',
    brokerSuspendMaxTimeMillis: opts.brokerSuspendMaxTimeMillis || 2000,
    rebalanceInterval: opts.rebalanceIntervalMs || 2000,
    maxReconsumeTimes: opts.maxReconsumeTimes === undefined ? 16 : opts.maxReconsumeTimes,
    ...opts.clientOptions,
  });
  consumer.on('error', err => console.error('[consumer error]', err && err.message));
  const failures = Object.assign({}, opts.fail || {});
  let consumed = 0;
  let finished = false;

  const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

  async function finish(event) {
    if (finished) return;
    finished = true;
    // ali-ons records a message's offset after its handler returns: let it record the last
    // one's. Then close(): it persists the offsets (UPDATE_CONSUMER_OFFSET, one-way); and let
    // that one-way request leave the socket before the process exits (process.exit does not
    // wait for pending writes: on a loaded machine the last offsets were lost that way).
    await sleep(300);
    await consumer.close();
    await sleep(300);
    emit(Object.assign({ consumed }, event));
    process.exit(event.event === 'done' ? 0 : 2);
  }

  consumer.subscribe(opts.topic, opts.subExpression || '*', async msg => {
    const body = msg.body ? msg.body.toString() : '';
    const fails = (failures[body] || 0) > 0;
    if (fails) failures[body] -= 1;
    emit({
      event: 'message',
      ok: !fails,
      msgId: msg.msgId,
      topic: msg.topic,
      tags: msg.tags,
      keys: msg.keys,
      body,
      queueId: msg.queueId,
      queueOffset: msg.queueOffset,
      commitLogOffset: msg.commitLogOffset,
      reconsumeTimes: msg.reconsumeTimes,
      bornHost: msg.bornHost,
      storeHost: msg.storeHost,
      properties: msg.properties,
    });
    // Fail by throwing: ali-ons wraps the handler of its %RETRY%<group> subscription without
    // passing its return value on, so Consumer.ACTION_RETRY would count a redelivery as consumed.
    if (fails) throw new Error(`failing ${body} on purpose`);
    consumed += 1;
    if (opts.expect && consumed >= opts.expect) setImmediate(() => finish({ event: 'done' }).catch(fail));
  });
  // A rebalance that changes this consumer's queues of the topic: report the queue ids it owns.
  consumer.on(`topic_${opts.topic}_queue_changed`, () => {
    const queues = [];
    for (const { messageQueue } of consumer.processQueueTable.values()) {
      if (messageQueue.topic === opts.topic) queues.push(Number(messageQueue.queueId));
    }
    emit({ event: 'queues', queues: queues.sort((a, b) => a - b) });
  });
  await consumer.ready();
  emit({ event: 'ready', clientId: consumer.clientId });
  setTimeout(() => finish({ event: 'timeout' }).catch(fail), opts.timeoutMs || 60000);
}

main().catch(fail);
