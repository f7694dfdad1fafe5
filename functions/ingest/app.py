"""The document queue's consumer: parse, chunk, embed and index each queued document."""

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from oberik.engine.documents import handle_sqs
from oberik.observability import logger, tracer


@logger.inject_lambda_context
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle_sqs(event)
