"""Golden wire bytes of the answers the gRPC door sends most, derived by hand field by field.

Protobuf fields are ``tag = field_number << 3 | wire_type`` then the value: a varint (type 0),
a length-prefixed string/message/packed list (type 2) or 4 little-endian bytes (type 5).
Proto3 leaves out scalars at their default unless the field is ``optional``. The values are
the ones :mod:`tests.grpc.test_golden` builds; the differential test decodes the same bytes
with the official client's own generated code.
"""

from __future__ import annotations

from store import MessageView

STATUS_OK = bytes.fromhex(
    "08a09c01"  # 1 code: OK = 20000 (varint a0 9c 01)
    "12024f4b"  # 2 message: "OK"
)

#: QueryRouteResponse for topic "T": one queue, id 0, READ_WRITE, on broker "b1" (master)
#: reachable at 127.0.0.1:8081, accepting the four message types.
QUERY_ROUTE_ONE_QUEUE = bytes.fromhex(
    "0a08"
    + STATUS_OK.hex()  # 1 status
    + "1227"  # 2 message_queues[0], 39 bytes
    + "0a03120154"  # 1 topic: Resource{2 name "T"}
    # 2 id 0: left out
    + "1804"  # 3 permission READ_WRITE = 4
    + "2218"  # 4 broker, 24 bytes
    + "0a026231"  # 1 name "b1" (2 id 0: left out)
    + "1a12"  # 3 endpoints, 18 bytes
    + "0801"  # 1 scheme IPv4 = 1
    + "120e"  # 2 addresses[0], 14 bytes
    + "0a09"
    + b"127.0.0.1".hex()  # 1 host
    + "10913f"  # 2 port 8081
    + "2a0401020304"  # 5 accept_message_types, packed: NORMAL FIFO DELAY TRANSACTION
)

#: The stored message of :data:`RECEIVED_MESSAGE` (a normal message, first delivery).
STORED_VIEW = MessageView(
    topic="T",
    queue_id=1,
    queue_offset=7,
    commitlog_offset=0,
    size_bytes=0,
    msg_id="0A00000200002A9F0000000000000000",
    body=b"hi",
    flag=0,
    sys_flag=0,
    born_timestamp_ms=1000,
    born_host=("10.0.0.1", 5),
    store_timestamp_ms=2500,
    store_host=("10.0.0.2", 10911),
    reconsume_times=0,
    prepared_transaction_offset=0,
    properties={"TAGS": "a", "KEYS": "k1 k2", "UNIQ_KEY": "01AB", "color": "red"},
    body_crc=0,
)

MD5_OF_HI = "49F68A5C8493EC2C0BF489821C21FC3B"

#: ReceiveMessageResponse{message} for :data:`STORED_VIEW` with receipt handle "h".
RECEIVED_MESSAGE = bytes.fromhex(
    "128601"  # 2 message, 134 bytes
    + "0a03120154"  # 1 topic: Resource{2 name "T"}
    + "120c0a05"
    + b"color".hex()
    + "1203"
    + b"red".hex()  # 2 user_properties {"color": "red"}
    + "1a6d"  # 3 system_properties, 109 bytes
    + "0a0161"  # 1 tag "a"
    + "12026b31"
    + "12026b32"  # 2 keys "k1", "k2"
    + "1a04"
    + b"01AB".hex()  # 3 message_id = UNIQ_KEY
    + "2224"
    + "0802"
    + "1220"
    + MD5_OF_HI.encode().hex()  # 4 body_digest{MD5 = 2, uppercase hex}
    + "2801"  # 5 body_encoding IDENTITY = 1
    + "3001"  # 6 message_type NORMAL = 1
    + "3a020801"  # 7 born_timestamp {1 seconds 1}
    + "4208"
    + b"10.0.0.1".hex()  # 8 born_host: the born IP, no port
    + "4a08"
    + "0802"
    + "1080cab5ee01"  # 9 store_timestamp {seconds 2, nanos 500000000}
    + "520e"
    + b"10.0.0.2:10911".hex()  # 10 store_host "ip:port"
    + "620168"  # 12 receipt_handle "h"
    + "6801"  # 13 queue_id 1
    + "7007"  # 14 queue_offset 7
    + "800101"  # 16 delivery_attempt 1 (tag 128 = varint 80 01)
    + "22026869"  # 4 body "hi"
)

#: TelemetryCommand answering a producer's settings {client_type PRODUCER, publishing{topics [T]}}.
SETTINGS_REPLY_PRODUCER = bytes.fromhex(
    "0a08"
    + STATUS_OK.hex()  # 1 status OK
    + "1228"  # 2 settings, 40 bytes
    + "0801"  # 1 client_type PRODUCER = 1
    + "1a14"  # 3 backoff_policy, 20 bytes
    + "0803"  # 1 max_attempts 3
    + "1210"  # 2 exponential_backoff, 16 bytes
    + "0a05"
    + "1080ade204"  # 1 initial: Duration{2 nanos 10,000,000} = 10 ms
    + "1202"
    + "0801"  # 2 max: Duration{1 seconds 1}
    + "1d00000040"  # 3 multiplier 2.0 (float, fixed32)
    + "2a0c"  # 5 publishing, 12 bytes
    + "0a03120154"  # 1 topics [Resource{name "T"}]
    + "1080808002"  # 2 max_body_size 4 MiB = 4194304
    + "1801"  # 3 validate_message_type true
    + "4200"  # 8 metric {on false}: present, empty
)
