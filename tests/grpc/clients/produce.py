"""Runs in the official client's venv: a Producer sends messages to the gRPC door.

argv[1]: JSON ``{"endpoint": "127.0.0.1:PORT", "topic": T, "expect_max_body_size": N,
"messages": [{"body": str, "tag"?, "keys"?: [str], "properties"?: {}, "message_group"?,
"delivery_timestamp"? (epoch s)}]}``.
Prints one line per receipt ``{"message_id", "offset", "queue", "transaction_id"}``, then
``{"max_body_size": N}``: the limit the producer took from the server's settings reply (it waits
up to 10 s for it to become ``expect_max_body_size``).
"""

import json
import sys
import time

from rocketmq import ClientConfiguration, Credentials, Message, Producer


def message_of(topic: str, spec: dict) -> Message:
    message = Message()
    message.topic = topic
    message.body = spec["body"].encode()
    if "tag" in spec:
        message.tag = spec["tag"]
    for key in spec.get("keys", []):
        message.keys = key
    for name, value in spec.get("properties", {}).items():
        message.add_property(name, value)
    if "message_group" in spec:
        message.message_group = spec["message_group"]
    if "delivery_timestamp" in spec:  # epoch seconds, as the Python client takes it
        message.delivery_timestamp = spec["delivery_timestamp"]
    return message


def main() -> None:
    argument = json.loads(sys.argv[1])
    topic = argument["topic"]
    producer = Producer(ClientConfiguration(argument["endpoint"], Credentials()), (topic,))
    producer.startup()
    try:
        for spec in argument["messages"]:
            receipt = producer.send(message_of(topic, spec))
            print(
                json.dumps(
                    {
                        "message_id": receipt.message_id,
                        "offset": receipt.offset,
                        "queue": str(receipt.message_queue),  # broker.topic.queue_id
                        "transaction_id": receipt.transaction_id,
                    }
                ),
                flush=True,
            )
        deadline = time.monotonic() + 10
        expected = argument.get("expect_max_body_size", 4 * 1024 * 1024)
        while producer._Producer__max_body_size != expected and time.monotonic() < deadline:
            time.sleep(0.05)
        print(json.dumps({"max_body_size": producer._Producer__max_body_size}), flush=True)
    finally:
        producer.shutdown()


if __name__ == "__main__":
    main()
