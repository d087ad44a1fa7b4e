# A small runtime image: no dev dependencies, non-root, with a healthcheck.
# Migrations run once as a separate step: `docker run --rm IMAGE python -m app migrate`.
FROM python:3.11-slim AS build
WORKDIR /src
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY pyproject.toml README.md ./
COPY app ./app
# Dependencies only: the application itself runs from /srv (app/, prompts/, migrations/ side by
# side, as in the repository), so the package is uninstalled again after its dependencies.
RUN python -m venv /opt/venv \
 && /opt/venv/bin/pip install ".[mysql]" \
 && /opt/venv/bin/pip uninstall -y agent-memory-backend

FROM python:3.11-slim
ENV PATH="/opt/venv/bin:$PATH" \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    LOG_FORMAT=json \
    WEB_CONCURRENCY=2 \
    PROMETHEUS_MULTIPROC_DIR=/tmp/amem-metrics
RUN useradd --system --uid 10001 --home-dir /srv --shell /usr/sbin/nologin app
WORKDIR /srv
COPY --from=build /opt/venv /opt/venv
COPY app ./app
COPY prompts ./prompts
COPY migrations ./migrations
RUN mkdir -p /srv/data && chown app /srv/data
USER app
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
  CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2).status == 200 else 1)"
# The workers' metrics directory starts empty: an earlier run's values would be summed in.
CMD ["sh", "-c", "rm -rf \"$PROMETHEUS_MULTIPROC_DIR\" && mkdir -p \"$PROMETHEUS_MULTIPROC_DIR\" && exec uvicorn app.main:app --host 0.0.0.0 --port 8000 --workers ${WEB_CONCURRENCY} --proxy-headers --no-server-header --timeout-graceful-shutdown 10 --http app.http_protocol:BoundedHttpProtocol"]
