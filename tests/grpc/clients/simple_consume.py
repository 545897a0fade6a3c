"""Runs in the official client's venv: a SimpleConsumer receives from the gRPC door.

argv[1]: JSON ``{"endpoint", "topic", "group", "want": N, "timeout_s", "invisible_s",
"ack": bool, "tag"?, "change_invisible_s"?, "hold_s"?}``. Receives until ``want`` messages came
or ``timeout_s`` passed, printing one line per message ``{"message_id", "body", "attempt",
"message_group", "tag", "topic", "acked"}``. With ``change_invisible_s`` each message's invisible
time is changed first (the client keeps the new handle), then the consumer waits ``hold_s`` and
receives once more (printing ``{"received_while_hidden": n}``) before acking with the new handle.
Ends with ``{"done": count}``.

For a failover: ``"batch": n`` receives at most n at a time; ``"progress_file"`` gets one line per
acked message id; after ``"pause_after"`` messages the consumer waits for ``"resume_file"`` to
exist; with ``"tolerate_errors"`` a failing receive (a dead broker, until the client's route
refresh moves it to the new master) is retried after 0.5 s and counted (``{"errors": n}``).
"""

import json
import os
import sys
import time

from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer


def main() -> None:
    argument = json.loads(sys.argv[1])
    config = ClientConfiguration(argument["endpoint"], Credentials())
    subscription = {argument["topic"]: FilterExpression(argument.get("tag", "*"))}
    consumer = SimpleConsumer(config, argument["group"], subscription, await_duration=5)
    consumer.startup()
    count = errors = 0
    try:
        deadline = time.monotonic() + argument["timeout_s"]
        while count < argument["want"] and time.monotonic() < deadline:
            if count == argument.get("pause_after"):
                while not os.path.exists(argument["resume_file"]) and time.monotonic() < deadline:
                    time.sleep(0.05)
            try:
                received = consumer.receive(argument.get("batch", 16), argument["invisible_s"])
            except Exception:
                if not argument.get("tolerate_errors"):
                    raise
                errors += 1
                time.sleep(0.5)
                continue
            for message in received:
                count += 1
                if "change_invisible_s" in argument:
                    consumer.change_invisible_duration(message, argument["change_invisible_s"])
                    time.sleep(argument.get("hold_s", 0))
                    again = consumer.receive(16, argument["invisible_s"])
                    print(json.dumps({"received_while_hidden": len(again)}), flush=True)
                if argument["ack"]:
                    consumer.ack(message)
                    if "progress_file" in argument:
                        with open(argument["progress_file"], "a") as progress:
                            progress.write(message.message_id + "\n")
                line = {
                    "message_id": message.message_id,
                    "body": message.body.decode(),
                    "attempt": message.delivery_attempt,
                    "message_group": message.message_group,
                    "tag": message.tag,
                    "topic": message.topic,
                    "acked": argument["ack"],
                }
                print(json.dumps(line), flush=True)
        if argument.get("tolerate_errors"):
            print(json.dumps({"errors": errors}), flush=True)
        print(json.dumps({"done": count}), flush=True)
    finally:
        consumer.shutdown()


if __name__ == "__main__":
    main()
