"""Runs in the official client's venv: one Producer sends from many threads for a while.

argv[1]: JSON ``{"endpoint", "topic", "threads", "seconds", "body_bytes"}``. Prints
``{"sent": n, "errors": e, "seconds": s}`` (``s``: from the first send to the last answer).
"""

import json
import sys
import threading
import time

from rocketmq import ClientConfiguration, Credentials, Message, Producer


def main() -> None:
    argument = json.loads(sys.argv[1])
    topic = argument["topic"]
    producer = Producer(ClientConfiguration(argument["endpoint"], Credentials()), (topic,))
    producer.startup()
    body = b"x" * argument["body_bytes"]
    counts = [0] * argument["threads"]
    errors = [0] * argument["threads"]

    def sender(index: int, stop_at: float) -> None:
        while time.monotonic() < stop_at:
            message = Message()
            message.topic = topic
            message.body = body
            try:
                producer.send(message)
                counts[index] += 1
            except Exception:
                errors[index] += 1

    try:
        started = time.monotonic()
        stop_at = started + argument["seconds"]
        threads = [threading.Thread(target=sender, args=(i, stop_at)) for i in range(argument["threads"])]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - started
    finally:
        producer.shutdown()
    print(json.dumps({"sent": sum(counts), "errors": sum(errors), "seconds": elapsed}))


if __name__ == "__main__":
    main()
