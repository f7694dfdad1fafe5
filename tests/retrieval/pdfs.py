"""Real PDFs for the tests, drawn with reportlab."""

from __future__ import annotations

import io


def pdf(pages: list[str]) -> bytes:
    """A PDF with one page per string (each string drawn as lines of text)."""
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    out = io.BytesIO()
    c = canvas.Canvas(out, pagesize=A4)
    for text in pages:
        y = 800
        for line in text.split("\n"):
            c.drawString(60, y, line)
            y -= 16
        c.showPage()
    c.save()
    return out.getvalue()


def image_only_pdf() -> bytes:
    """A PDF whose only page holds a drawing and no text (like a scan)."""
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    out = io.BytesIO()
    c = canvas.Canvas(out, pagesize=A4)
    c.rect(100, 100, 300, 400, fill=1)
    c.showPage()
    c.save()
    return out.getvalue()
