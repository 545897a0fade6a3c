"""Runs in the official client's venv: a Producer then a SimpleConsumer, both with
``tls_enable`` as asked, against the gRPC door.

argv[1]: JSON ``{"endpoint", "topic", "group", "bodies": [str], "tls": bool, "timeout_s"}``.
The client trusts the CAs of ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH`` (gRPC's default roots, set
by the test): ``grpc.ssl_channel_credentials()`` without roots reads them.
Prints ``{"sent": message_id}`` per send, ``{"received": body}`` per acked message, then
``{"done": count}``; a producer that cannot start or send prints ``{"failed": message}``.
"""

import json
import sys
import time
from typing import Any

from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer


def produce(argument: dict[str, Any], config: ClientConfiguration) -> bool:
    producer = Producer(config, (argument["topic"],), tls_enable=argument["tls"])
    try:
        producer.startup()
        for body in argument["bodies"]:
            message = Message()
            message.topic = argument["topic"]
            message.body = body.encode()
            print(json.dumps({"sent": producer.send(message).message_id}), flush=True)
    except Exception as exc:  # the door is unreachable over this transport
        print(json.dumps({"failed": str(exc)}), flush=True)
        return False
    finally:
        producer.shutdown()
    return True


def consume(argument: dict[str, Any], config: ClientConfiguration) -> int:
    subscription = {argument["topic"]: FilterExpression("*")}
    consumer = SimpleConsumer(
        config, argument["group"], subscription, await_duration=5, tls_enable=argument["tls"]
    )
    consumer.startup()
    count = 0
    try:
        deadline = time.monotonic() + argument["timeout_s"]
        while count < len(argument["bodies"]) and time.monotonic() < deadline:
            for message in consumer.receive(16, 30):
                consumer.ack(message)
                count += 1
                print(json.dumps({"received": message.body.decode()}), flush=True)
    finally:
        consumer.shutdown()
    return count


def main() -> None:
    argument = json.loads(sys.argv[1])
    config = ClientConfiguration(argument["endpoint"], Credentials(), request_timeout=5)
    if produce(argument, config):
        print(json.dumps({"done": consume(argument, config)}), flush=True)


if __name__ == "__main__":
    main()
