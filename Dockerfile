# Two images from one file:
#   target "broker" (default): `sparkmq serve` on a store directory mounted at /data; no JVM.
#   target "operators": the stateful operator job (Spark, transformWithState) with a JRE, run as
#   a service of its own against the broker (docker-compose.yml).
FROM python:3.11-slim AS base

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY pyproject.toml README.md pyspark_sparkmq.py ./
COPY store ./store
COPY cluster ./cluster
COPY broker ./broker
COPY ingest_api ./ingest_api
COPY streaming ./streaming
COPY sparkmq ./sparkmq
RUN pip install ".[kafka,grpc]"

RUN useradd --create-home --uid 10001 sparkmq && mkdir -p /data /checkpoints \
    && chown sparkmq:sparkmq /data /checkpoints

FROM base AS operators
USER root
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*
USER sparkmq
ENV PYSPARK_PYTHON=/usr/local/bin/python
VOLUME ["/checkpoints"]
# Resolver progress and state live in the checkpoint; the broker stays the only writer.
CMD ["sparkmq", "operators", "--endpoint", "http://broker:8080", "--checkpoint-dir", "/checkpoints"]

FROM base AS broker
USER sparkmq
VOLUME ["/data"]
EXPOSE 8080

# uvicorn stops cleanly on SIGTERM: in-flight requests finish, the store is closed (no abort file).
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2)"]

# Inside the container the broker must listen on all interfaces; publish the port on the host
# side only where it should be reachable (docker-compose.yml binds it to 127.0.0.1).
# The operators run as their own service here (docker-compose.yml); alone, drop --operators off
# and use the "operators" target, which has the JRE the local job needs.
CMD ["sparkmq", "serve", "--store-dir", "/data", "--host", "0.0.0.0", "--port", "8080", "--operators", "off"]
