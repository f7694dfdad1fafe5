"""Lambda adapter for the HTTP API: the FastAPI app behind API Gateway (REST), through mangum."""

from typing import Any

from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext
from mangum import Mangum

from oberik.api.app import create_app
from oberik.observability import logger, metrics, tracer

_asgi = Mangum(create_app(), lifespan="off")


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return _asgi(event, context)
