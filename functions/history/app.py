"""The table's stream consumer: embed new conversation messages into the history index (search_history)."""

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from oberik.engine.history import handle_stream
from oberik.observability import logger, tracer


@logger.inject_lambda_context
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle_stream(event)
