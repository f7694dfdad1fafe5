"""The delivery queue's consumer: POST each queued notification; report the ones to retry."""

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from oberik.engine.deliveries import handle_sqs
from oberik.observability import logger, metrics, tracer


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle_sqs(event)
