"""Runs in the official client's venv: PushConsumers of one group consume from the gRPC door.

argv[1]: JSON ``{"endpoint", "topic", "group", "consumers": n, "want": N, "timeout_s",
"settle_s"}``. Starts ``n`` PushConsumers in the group (each its own client id); every handler
succeeds. Once ``want`` messages were handled (or ``timeout_s`` passed) it waits ``settle_s`` more
for duplicates, then prints one line per handled message ``{"consumer": i, "message_id",
"body", "attempt"}`` and ``{"done": count}``.
"""

import json
import sys
import threading
import time

from rocketmq import ClientConfiguration, Credentials, FilterExpression, PushConsumer
from rocketmq.v5.consumer.push import ConsumeResult, MessageListener


class Recorder(MessageListener):
    def __init__(self, index: int, seen: list, lock: threading.Lock) -> None:
        self.index = index
        self.seen = seen
        self.lock = lock

    def consume(self, message) -> ConsumeResult:
        with self.lock:
            self.seen.append(
                {
                    "consumer": self.index,
                    "message_id": message.message_id,
                    "body": message.body.decode(),
                    "attempt": message.delivery_attempt,
                }
            )
        return ConsumeResult.SUCCESS


def main() -> None:
    argument = json.loads(sys.argv[1])
    config = ClientConfiguration(argument["endpoint"], Credentials())
    seen: list = []
    lock = threading.Lock()
    consumers = []
    try:
        for index in range(argument["consumers"]):
            consumer = PushConsumer(
                config,
                argument["group"],
                Recorder(index, seen, lock),
                {argument["topic"]: FilterExpression("*")},
                consumption_thread_count=4,
            )
            consumer.startup()
            consumers.append(consumer)
        deadline = time.monotonic() + argument["timeout_s"]
        while time.monotonic() < deadline:
            with lock:
                if len(seen) >= argument["want"]:
                    break
            time.sleep(0.05)
        time.sleep(argument["settle_s"])
    finally:
        for consumer in consumers:
            consumer.shutdown()
    with lock:
        for line in seen:
            print(json.dumps(line))
        print(json.dumps({"done": len(seen)}))


if __name__ == "__main__":
    main()
