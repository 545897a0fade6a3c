"""Generated from the vendored ``protos/apache/rocketmq/v2/*.proto`` by ``python -m
ingest_api.grpc.generate``: do not edit by hand (a test compares them with a fresh generation).

``definition_pb2`` (messages, enums such as ``Code``), ``service_pb2`` (requests and responses)
and ``service_pb2_grpc`` (``MessagingServiceServicer`` and its registration).
"""
