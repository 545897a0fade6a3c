"""Runs in the official client's venv: one Producer sends from many threads for a while.

argv[1]: JSON ``{"endpoint", "topic", "threads", "seconds", "body_bytes"}``. Prints
``{"sent": n, "errors": e, "seconds": s, "cpu_s": c}`` (``s``: from the first send to the last
answer; ``c``: this process's CPU time over the same span, its start and setup left out).
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
        started, cpu_started = time.monotonic(), time.process_time()
        stop_at = started + argument["seconds"]
        threads = [threading.Thread(target=sender, args=(i, stop_at)) for i in range(argument["threads"])]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed, cpu = time.monotonic() - started, time.process_time() - cpu_started
    finally:
        producer.shutdown()
    print(json.dumps({"sent": sum(counts), "errors": sum(errors), "seconds": elapsed, "cpu_s": cpu}))


if __name__ == "__main__":
    main()
