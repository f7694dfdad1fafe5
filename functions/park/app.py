"""The turn's Park task: store the task token and write the pause frames."""

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from oberik.engine.handlers import park
from oberik.observability import logger, metrics, tracer


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return park(event)
