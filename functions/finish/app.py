"""The turn's Finish task: persist the answer, write done, release the session."""

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from oberik.engine.handlers import finish
from oberik.observability import logger, metrics, tracer


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return finish(event)
