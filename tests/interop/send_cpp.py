"""Send one message with a PyPI RocketMQ C++-client binding (rocketmq==0.4.4 or
rocketmq-python-cvs==2.1.0.3; both import as ``rocketmq``), finding TopicTest's route through
the NameServer given on the command line.

usage: python send_cpp.py NAMESRV_ADDR PRODUCER_GROUP BODY
NAMESRV_ADDR may be an address server's URL (``http://host:port/rocketmq/nsaddr``): the client is
then given no NameServer address, only that domain (``set_namesrv_domain``), and polls it for one.
Run it with PYTHONPATH=<clients dir>/cpp1 or /cpp2 (tools/install_clients.sh installs both).
With ROCKETMQ_ACCESS_KEY and ROCKETMQ_SECRET_KEY set, the client signs its requests (ACL).
Prints ``ROCKETMQ_MODULE <path>`` and ``SEND_RESULT <json>``; exits 0 only on SendStatus.OK.
"""

import json
import os
import sys
import time

import rocketmq
from rocketmq.client import Message, Producer, SendStatus


def main() -> int:
    namesrv, group, body = sys.argv[1:4]
    print(f"ROCKETMQ_MODULE {rocketmq.__file__}", flush=True)
    started = time.monotonic()
    producer = Producer(group, timeout=3000)  # send timeout, ms
    if namesrv.startswith("http://"):
        producer.set_namesrv_domain(namesrv)
    else:
        producer.set_namesrv_addr(namesrv)
    if os.environ.get("ROCKETMQ_ACCESS_KEY"):
        producer.set_session_credentials(os.environ["ROCKETMQ_ACCESS_KEY"], os.environ["ROCKETMQ_SECRET_KEY"], "LOCAL")
    producer.start()
    ok = False
    try:
        msg = Message("TopicTest")
        msg.set_keys("interop-key")
        msg.set_tags("interop")
        msg.set_body(body)
        result = producer.send_sync(msg)
        ok = result.status == SendStatus.OK
        status = getattr(result.status, "name", str(result.status))
        report = {"ok": ok, "status": status, "msgId": result.msg_id, "offset": result.offset}
        print("SEND_RESULT " + json.dumps(report), flush=True)
    finally:
        sent = time.monotonic()
        producer.shutdown()
        print(f"TIMING send={sent - started:.3f}s shutdown={time.monotonic() - sent:.3f}s", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
