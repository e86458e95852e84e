'use strict';
// Send one message with npm ali-ons@3.12.0, finding TopicTest's route through the NameServer
// given on the command line (a plain RocketMQ NameServer: no Aliyun address server).
//
// usage: NAMESRV_CLIENTS_DIR=<clients dir> node send_ons.js NAMESRV_ADDR PRODUCER_GROUP BODY
// ali-ons is loaded from $NAMESRV_CLIENTS_DIR/node/node_modules (tools/install_clients.sh).
// Prints `SEND_RESULT <json>`; exits 0 only on SEND_OK.
const path = require('path');

const clientsDir = process.env.NAMESRV_CLIENTS_DIR;
if (!clientsDir) {
  console.error('NAMESRV_CLIENTS_DIR is not set');
  process.exit(3);
}
const onsPath = path.join(clientsDir, 'node', 'node_modules', 'ali-ons');
const { Producer, Message } = require(onsPath);
const [nameSrv, producerGroup, body] = process.argv.slice(2);

// ali-ons asserts an httpclient exists but uses it only to ask an address server for the
// NameServer list when nameSrv is not given: any use is a failure here.
const httpclient = { request: async url => { throw new Error('httpclient must not be used: ' + url); } };

async function main() {
  const started = Date.now();
  const producer = new Producer({
    httpclient,
    nameSrv,
    accessKeyId: 'interop', // adds AccessKey/OnsChannel/Signature extFields, as the Aliyun client does
    accessKeySecret: 'interop',
    producerGroup,
    sendMsgTimeout: 3000,
  });
  producer.on('error', err => console.error('producer error', err));
  await producer.ready();
  const result = await producer.send(new Message('TopicTest', 'interop', body));
  const ok = result.sendStatus === 'SEND_OK';
  console.log('SEND_RESULT ' + JSON.stringify({ ok, status: result.sendStatus, msgId: result.msgId,
    offset: result.queueOffset, queue: result.messageQueue }));
  const sent = Date.now();
  await producer.close();
  // close() leaves the shared MQClient open while the hidden inner producer
  // (Producer.defaultProducer) is registered; close it too.
  if (Producer.defaultProducer) {
    await Producer.defaultProducer.close();
    Producer.defaultProducer = null;
  }
  console.log(`TIMING send=${(sent - started) / 1000}s close=${(Date.now() - sent) / 1000}s`);
  return ok ? 0 : 1;
}

// exit explicitly: ali-ons' scheduled tasks sleep up to 30 s (not unref'd) even after close()
main().then(code => process.exit(code), err => { console.error(err); process.exit(2); });
