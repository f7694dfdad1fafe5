"""DynamoDB storage of documents' metadata (one item per document beside its project) and of wiki pages (one
partition per project scope). The documents' bytes live in S3 and their passages in the vector store."""

from __future__ import annotations

from typing import Any

from oberik.adapters import keys
from oberik.domain.documents import Document


class DocumentsStore:
    """Mixed into `DynamoStore`: uses its table, client and helpers."""

    table: str
    db: Any
    _get: Any
    _query: Any
    _applied: Any
    _update_request: Any

    # --- documents ---------------------------------------------------------------------------------------

    def create_document(self, doc: Document) -> bool:
        """Store a new document's metadata; False when one with that id already exists."""
        from oberik.adapters.dynamodb import serialize

        item = serialize({**keys.document_key(doc.project_id, doc.id), **doc.model_dump(mode="json")})
        return bool(
            self._applied(
                lambda: self.db.put_item(
                    TableName=self.table, Item=item, ConditionExpression="attribute_not_exists(pk)"
                )
            )
        )

    def get_document(self, project_id: str, doc_id: str) -> Document | None:
        from oberik.adapters.dynamodb import _strip_keys

        item = self._get(keys.document_key(project_id, doc_id))
        return Document.model_validate(_strip_keys(item)) if item else None

    def list_documents(self, project_id: str) -> list[Document]:
        from oberik.adapters.dynamodb import _strip_keys

        items = self._query(f"PROJECT#{project_id}", keys.DOCUMENT_PREFIX)
        return [Document.model_validate(_strip_keys(item)) for item in items]

    def update_document(self, project_id: str, doc_id: str, **fields: Any) -> bool:
        """Change fields of an existing document; False (nothing written) when it no longer exists."""
        request = self._update_request(keys.document_key(project_id, doc_id), fields, condition="attribute_exists(pk)")
        return bool(self._applied(lambda: self.db.update_item(**request)))

    def delete_document(self, project_id: str, doc_id: str) -> None:
        from oberik.adapters.dynamodb import serialize

        self.db.delete_item(TableName=self.table, Key=serialize(keys.document_key(project_id, doc_id)))

    # --- wiki pages ------------------------------------------------------------------------------------

    def put_wiki_page(self, project_id: str, scope: str, slug: str, page: dict[str, Any]) -> None:
        from oberik.adapters.dynamodb import serialize

        self.db.put_item(TableName=self.table, Item=serialize({**keys.wiki_page_key(project_id, scope, slug), **page}))

    def get_wiki_page(self, project_id: str, scope: str, slug: str) -> dict[str, Any] | None:
        from oberik.adapters.dynamodb import _strip_keys

        item = self._get(keys.wiki_page_key(project_id, scope, slug))
        return _strip_keys(item) if item else None

    def list_wiki_pages(self, project_id: str, scope: str) -> list[dict[str, Any]]:
        from oberik.adapters.dynamodb import _strip_keys

        return [_strip_keys(i) for i in self._query(keys.wiki_pk(project_id, scope), keys.WIKI_PAGE_PREFIX)]
