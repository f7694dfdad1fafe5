"""The browser host Lambda (a container image with Chromium): keeps one conversation's page for as long as it is
used, serving the commands the step leaves in the table (oberik.browser.host)."""

import asyncio
import json
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from oberik.adapters.aws import client
from oberik.adapters.dynamodb import DynamoStore
from oberik.browser.host import HostLimits, serve_event
from oberik.observability import logger
from oberik.settings import get_settings


@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    s = get_settings()

    def successor(ev: dict[str, Any]) -> None:  # nearly out of time: a fresh host restores the saved page
        client("lambda").invoke(FunctionName=context.function_name, InvocationType="Event", Payload=json.dumps(ev))

    out = asyncio.run(
        serve_event(
            event,
            store=DynamoStore(s),
            remaining_ms=context.get_remaining_time_in_millis,
            executable=s.browser_executable,
            limits=HostLimits(idle_seconds=s.browser_idle_seconds, max_age_seconds=s.browser_max_age_seconds),
            allow_private=s.allow_private_webhooks,
            successor=successor,
        )
    )
    logger.info("browser host stopped", extra=out)
    return out
