"""The turn's Step task: one model call and the tools it asked for."""

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from oberik.engine.handlers import step
from oberik.observability import logger, metrics, tracer


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return step(event)
