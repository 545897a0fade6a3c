"""Runs in the official client's venv: decode wire bytes with the client's own code.

argv[1]: JSON ``{"messages": [hex of an apache.rocketmq.v2.Message, ...],
"golden": {"TypeName": hex, ...}}``. Prints one JSON line per message with what the client's
``Message.fromProtobuf`` made of it, then one line per golden vector with the client's pb2
re-serialization (deterministic) of the decoded bytes.
"""

import json
import sys

from rocketmq import Message
from rocketmq.grpc_protocol import definition_pb2, service_pb2


def decoded(hex_bytes: str) -> dict:
    wire = definition_pb2.Message()
    wire.ParseFromString(bytes.fromhex(hex_bytes))
    message = Message().fromProtobuf(wire)
    return {
        "topic": message.topic,
        "tag": message.tag,
        "keys": sorted(message.keys),
        "message_id": message.message_id,
        "body_hex": message.body.hex(),
        "corrupted": message.corrupted,
        "delivery_attempt": message.delivery_attempt,
        "properties": dict(message.properties),
        "message_group": message.message_group,
        "delivery_timestamp": message.delivery_timestamp,
        "born_host": message.born_host,
        "born_timestamp": message.born_timestamp,
        "receipt_handle": message.receipt_handle,
        "message_type": int(message.message_type),
    }


def reserialized(type_name: str, hex_bytes: str) -> dict:
    module = definition_pb2 if hasattr(definition_pb2, type_name) else service_pb2
    value = getattr(module, type_name)()
    value.ParseFromString(bytes.fromhex(hex_bytes))
    return {"type": type_name, "hex": value.SerializeToString(deterministic=True).hex(), "text": str(value)}


def main() -> None:
    argument = json.loads(sys.argv[1])
    for hex_bytes in argument.get("messages", []):
        print(json.dumps({"message": decoded(hex_bytes)}))
    for type_name, hex_bytes in argument.get("golden", {}).items():
        print(json.dumps({"golden": reserialized(type_name, hex_bytes)}))


if __name__ == "__main__":
    main()
