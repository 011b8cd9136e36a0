# One Logbus broker: `docker build -t logbus .`, then
#   docker run -p 8080:8080 -v logbus-data:/data logbus
# Arguments after the image name are `logbus serve` flags (docker-compose.yml: a cluster).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/logbus

# Dependencies first, read from pyproject.toml: a layer that survives code changes.
COPY pyproject.toml README.md ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt

# Editable: the broker serves openapi/asyncapi.yaml from beside the app/ package.
COPY app ./app
COPY logbus ./logbus
COPY openapi ./openapi
RUN pip install --no-deps -e . \
    && useradd --system --uid 10001 --home-dir /data logbus \
    && mkdir -p /data \
    && chown logbus /data

USER logbus
# 0.0.0.0 with no authentication is refused at start (README "Security"): configure
# authentication, or pass --allow-unauthenticated-network where the network is trusted.
ENV LOGBUS_DATA_DIR=/data \
    LOGBUS_HOST=0.0.0.0 \
    LOGBUS_PORT=8080
VOLUME ["/data"]
EXPOSE 8080

# Ready = logs loaded and recovered (and, in cluster mode, registered); the slim image has no
# curl, so Python asks.
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request as u; u.urlopen('http://127.0.0.1:%s/readyz' % os.environ.get('LOGBUS_PORT', '8080'), timeout=2)"]

# SIGTERM (docker stop) is a clean shutdown: logs flushed, .clean_shutdown written.
STOPSIGNAL SIGTERM
ENTRYPOINT ["logbus", "serve"]
CMD []
