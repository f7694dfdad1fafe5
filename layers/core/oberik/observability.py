"""Logger, tracer and metrics, created once and imported everywhere."""

from aws_lambda_powertools import Logger, Metrics, Tracer

logger = Logger(service="oberik")
tracer = Tracer(service="oberik", auto_patch=False)
metrics = Metrics(namespace="Oberik", service="oberik")
