"""Runs in the official client's venv: a Producer or a SimpleConsumer with credentials, whose
refusals are printed as values (the test reads the code the client saw).

argv[1]: JSON ``{"endpoint", "access_key", "secret_key", "topic", "send"?: [body, ...],
"receive"?: {"group", "want", "timeout_s"}}``. Sends each body (one line per receipt
``{"sent": message_id}``), then receives and acks up to ``want`` messages (one line per message
``{"received": body}``). The first call that raises ends the run with ``{"error": class name,
"code": the RocketMQ Code the client got (None when it has none), "step": "send" | "receive"}``;
a clean run ends with ``{"done": true}``.
"""

import json
import sys
import time

from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer


def refused(step: str, exc: Exception) -> None:
    code = getattr(exc, "code", None)
    line = {"error": type(exc).__name__, "code": code, "step": step, "message": str(exc)}
    print(json.dumps(line), flush=True)


def send(config: ClientConfiguration, topic: str, bodies: list) -> bool:
    producer = Producer(config, (topic,))
    producer.startup()
    try:
        for body in bodies:
            message = Message()
            message.topic = topic
            message.body = body.encode()
            try:
                receipt = producer.send(message)
            except Exception as exc:
                refused("send", exc)
                return False
            print(json.dumps({"sent": receipt.message_id}), flush=True)
        return True
    finally:
        producer.shutdown()


def receive(config: ClientConfiguration, topic: str, spec: dict) -> bool:
    consumer = SimpleConsumer(config, spec["group"], {topic: FilterExpression("*")}, await_duration=5)
    consumer.startup()
    try:
        count = 0
        deadline = time.monotonic() + spec["timeout_s"]
        while count < spec["want"] and time.monotonic() < deadline:
            try:
                messages = consumer.receive(16, 20)
            except Exception as exc:
                refused("receive", exc)
                return False
            for message in messages:
                consumer.ack(message)
                count += 1
                print(json.dumps({"received": message.body.decode()}), flush=True)
        return True
    finally:
        consumer.shutdown()


def main() -> None:
    argument = json.loads(sys.argv[1])
    credentials = Credentials(argument["access_key"], argument["secret_key"])
    config = ClientConfiguration(argument["endpoint"], credentials, request_timeout=3)
    topic = argument["topic"]
    if "send" in argument and not send(config, topic, argument["send"]):
        return
    if "receive" in argument and not receive(config, topic, argument["receive"]):
        return
    print(json.dumps({"done": True}), flush=True)


if __name__ == "__main__":
    main()
