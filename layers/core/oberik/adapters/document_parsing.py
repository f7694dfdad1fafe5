"""Turning an uploaded file into text, page by page: UTF-8 text and markdown as they are, HTML through
trafilatura (the readable body, without navigation and boilerplate), PDF through pypdf (one entry per page)."""

from __future__ import annotations

import io
import logging

Pages = list[tuple[int | None, str]]


class ParseError(Exception):
    """The file could not be read as the type it claims to be; the message says why, for a person."""


def parse(data: bytes, content_type: str) -> Pages:
    if content_type == "application/pdf":
        return _pdf(data)
    text = _decode(data)
    if content_type == "text/html":
        return [(None, _html(text))]
    if not text.strip():
        raise ParseError("The document is empty: it contains no text to index.")
    return [(None, text)]


def _decode(data: bytes) -> str:
    if data.startswith(b"%PDF-"):
        raise ParseError("The file is a PDF but was declared as text; upload it with content_type application/pdf.")
    for encoding in ("utf-8-sig", "utf-16") if data[:2] in (b"\xff\xfe", b"\xfe\xff") else ("utf-8-sig",):
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    raise ParseError(
        "The file is not UTF-8 text, so it cannot be read as text, markdown or HTML. Convert it to UTF-8, or upload "
        "a PDF with content_type application/pdf."
    )


def _html(html: str) -> str:
    import trafilatura

    logging.getLogger("trafilatura").setLevel(logging.ERROR)
    text = trafilatura.extract(html, include_comments=False, include_tables=True, favor_recall=True)
    if not text or not text.strip():
        raise ParseError("The HTML page has no readable text (only markup, scripts or navigation) to index.")
    return text


def _pdf(data: bytes) -> Pages:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError, PyPdfError

    logging.getLogger("pypdf").setLevel(logging.ERROR)
    if not data.lstrip()[:5] == b"%PDF-":
        raise ParseError("The file is not a PDF (it does not start with %PDF-); check the content_type.")
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            try:
                if not reader.decrypt(""):
                    raise ParseError("The PDF is password-protected; upload a copy without a password.")
            except NotImplementedError as e:
                raise ParseError("The PDF is encrypted with a scheme that cannot be opened here.") from e
        pages: Pages = []
        for number, page in enumerate(reader.pages, start=1):
            pages.append((number, page.extract_text() or ""))
    except ParseError:
        raise
    except (PdfReadError, PyPdfError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ParseError(f"The PDF could not be read ({type(e).__name__}: {str(e)[:200]}); it may be damaged.") from e
    if not pages:
        raise ParseError("The PDF has no pages.")
    if not any(text.strip() for _, text in pages):
        raise ParseError(
            "The PDF has no extractable text: its pages are probably scanned images. Run it through OCR first."
        )
    return pages
