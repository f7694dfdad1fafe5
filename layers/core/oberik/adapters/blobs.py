"""Originals of uploaded documents in S3."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from oberik.adapters.aws import client
from oberik.settings import Settings, get_settings


def original_key(project_id: str, doc_id: str) -> str:
    return f"documents/{project_id}/{doc_id}/original"


class Blobs:
    def __init__(self, bucket: str, settings: Settings | None = None) -> None:
        if not bucket:
            raise RuntimeError("no documents bucket is configured (OBERIK_DOCUMENTS_BUCKET)")
        self.bucket = bucket
        self.settings = settings or get_settings()

    @property
    def s3(self) -> Any:
        return client("s3", self.settings)

    def put(self, key: str, data: bytes, content_type: str) -> None:
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=data, ContentType=content_type)

    def get(self, key: str) -> bytes | None:
        try:
            body = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"]
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise
        data: bytes = body.read()
        return data

    def delete(self, key: str) -> None:
        self.s3.delete_object(Bucket=self.bucket, Key=key)
