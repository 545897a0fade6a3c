# The sparkmq broker: `sparkmq serve` on a store directory mounted at /data.
# The broker needs no JVM; Spark jobs (added by later services) bring their own JRE.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY pyproject.toml README.md pyspark_sparkmq.py ./
COPY store ./store
COPY ingest_api ./ingest_api
COPY streaming ./streaming
COPY sparkmq ./sparkmq
RUN pip install .

RUN useradd --create-home --uid 10001 sparkmq && mkdir -p /data && chown sparkmq:sparkmq /data
USER sparkmq
VOLUME ["/data"]
EXPOSE 8080

# uvicorn stops cleanly on SIGTERM: in-flight requests finish, the store is closed (no abort file).
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2)"]

# Inside the container the broker must listen on all interfaces; publish the port on the host
# side only where it should be reachable (docker-compose.yml binds it to 127.0.0.1).
CMD ["sparkmq", "serve", "--store-dir", "/data", "--host", "0.0.0.0", "--port", "8080"]
