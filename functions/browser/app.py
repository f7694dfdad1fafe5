"""The browser host Lambda (a container image with Chromium): keeps one conversation's page for as long as it is
used, serving the commands the step leaves in the table (oberik.browser.host)."""

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from oberik.browser.host import serve_lambda
from oberik.observability import logger


@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    out = serve_lambda(event, context.function_name, context.get_remaining_time_in_millis)
    logger.info("browser host stopped", extra=out)
    return out
