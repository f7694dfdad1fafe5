#!/bin/sh
# StreamFunction's handler. The Lambda Web Adapter (its layer, started through
# AWS_LAMBDA_EXEC_WRAPPER=/opt/bootstrap) runs this script, waits until GET $AWS_LWA_READINESS_CHECK_PATH
# answers, then hands every API Gateway event to this server as a plain HTTP request and, with
# AWS_LWA_INVOKE_MODE=response_stream, streams the response back as it is written.
# The same FastAPI app as behind mangum; uvicorn is vendored here (requirements.txt), oberik and its
# dependencies come from the core layer (/opt/python).
set -eu
task_root="${LAMBDA_TASK_ROOT:-$(cd "$(dirname "$0")" && pwd)}"
PYTHONPATH="${task_root}:/opt/python${PYTHONPATH:+:${PYTHONPATH}}"
export PYTHONPATH
exec python -m uvicorn --factory oberik.api.app:create_app \
    --host "${AWS_LWA_HOST:-127.0.0.1}" \
    --port "${AWS_LWA_PORT:-${PORT:-8080}}" \
    --no-server-header
