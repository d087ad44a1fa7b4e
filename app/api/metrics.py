"""`GET /metrics`: the Prometheus text exposition (every worker's values under `serve
--workers N`); the same is served on METRICS_PORT when that is set."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from app.concurrency import to_thread
from app.telemetry import metrics

router = APIRouter(tags=["operations"])


@router.get(
    "/metrics",
    summary="Prometheus metrics (text exposition)",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}, "description": "The exposition"}},
)
async def prometheus_metrics() -> Response:
    # Off the event loop: in multiprocess mode it reads every worker's files.
    body = await to_thread(metrics.exposition)
    return Response(body, media_type=metrics.CONTENT_TYPE_LATEST)
