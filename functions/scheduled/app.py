"""The scheduled function: EventBridge Scheduler's target. Runs the scheduled task its input names."""

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from oberik.engine.tasks import handle
from oberik.observability import logger, metrics, tracer


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle(event)
