"""The gRPC door: RocketMQ 5's ``apache.rocketmq.v2.MessagingService`` for the official clients.

Optional extra ``sparkmq[grpc]`` (grpcio). The protocol is vendored in ``protos/`` and generated
into ``v2/`` (``python -m ingest_api.grpc.generate``). The door reads like a table (``server.py``):
each RPC checks its request (``requests.py``), converts messages (``convert.py``), asks the
broker through :class:`~ingest_api.grpc.port.GrpcBrokerPort` (plain values, no protobuf) and
answers (``responses.py``, codes in ``status.py``). Connected clients and their Telemetry streams
are in ``clients.py`` / ``telemetry.py``; the settings reply in ``settings.py``.

Importing this package does not import grpcio: take the server from ``ingest_api.grpc.server``.
"""
