"""Small PDFs built by the tests (so that no binary fixture is checked in): numbered objects, a cross-reference
table and a trailer around them."""

from __future__ import annotations


def assemble(objects: list[bytes]) -> bytes:
    """A PDF file of ``objects`` (bodies of objects 1, 2, …; object 1 the catalog)."""
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)
