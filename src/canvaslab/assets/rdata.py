"""Read character vectors out of an R package's lazy-load data base, without R.

Debian's ``r-cran-janeaustenr`` ships Jane Austen's six novels only as R objects: ``data/Rdata.rdx``
(a gzip-compressed serialized index: object name -> offset and length) and ``data/Rdata.rdb`` (each
object a 4-byte big-endian length followed by a zlib stream of R's XDR serialization). Installing R to
read six character vectors would be absurd, so this module implements the small part of R's
serialization format (``src/main/serialize.c``) those files use: vectors, strings, pairlists,
symbols and references. Anything else raises ``ValueError`` naming the type.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# SEXP type codes (R's Rinternals.h and serialize.c).
SYMSXP, LISTSXP, CHARSXP, LGLSXP, INTSXP, REALSXP, STRSXP, VECSXP = 1, 2, 9, 10, 13, 14, 16, 19
REFSXP, NILVALUE_SXP, GLOBALENV_SXP, EMPTYENV_SXP, BASEENV_SXP = 255, 254, 253, 242, 241

_IS_OBJECT, _HAS_ATTR, _HAS_TAG = 1 << 8, 1 << 9, 1 << 10


@dataclass
class RObject:
    """A decoded R value: ``value`` is a list (vectors), a str (symbols) or None; attributes by name."""

    value: Any
    attributes: dict[str, Any] = field(default_factory=dict)


class _XdrReader:
    def __init__(self, payload: bytes) -> None:
        if payload[:2] != b"X\n":
            raise ValueError("not an R XDR serialization (expected the 'X\\n' header)")
        self.data, self.pos = payload, 2
        self.refs: list[Any] = []
        version = self.int()
        self.int(), self.int()  # writer's R version, minimal reader version
        if version == 3:
            encoding_length = self.int()  # then the native encoding's name, unused here
            self.pos += encoding_length

    def int(self) -> int:
        (value,) = struct.unpack_from(">i", self.data, self.pos)
        self.pos += 4
        return value

    def length(self) -> int:
        n = self.int()
        if n == -1:  # long vector: two 32-bit halves
            upper, lower = self.int(), self.int()
            n = (upper << 32) + lower
        return n

    def string(self, n: int) -> str:
        raw = self.data[self.pos : self.pos + n]
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return raw.decode("latin-1")

    def attributes(self) -> dict[str, Any]:
        pairlist = self.item()
        return pairlist.attributes if isinstance(pairlist, RObject) else {}

    def item(self) -> Any:
        flags = self.int()
        kind = flags & 0xFF
        if kind in (NILVALUE_SXP, GLOBALENV_SXP, EMPTYENV_SXP, BASEENV_SXP):
            return None
        if kind == REFSXP:
            index = flags >> 8 or self.int()
            return self.refs[index - 1]
        if kind == SYMSXP:
            name = self.item()
            self.refs.append(name)
            return name
        if kind == LISTSXP:
            return self._pairlist(flags)
        if kind == CHARSXP:
            n = self.int()
            return None if n == -1 else self.string(n)
        if kind in (LGLSXP, INTSXP):
            n = self.length()
            values = list(struct.unpack_from(f">{n}i", self.data, self.pos))
            self.pos += 4 * n
        elif kind == REALSXP:
            n = self.length()
            values = list(struct.unpack_from(f">{n}d", self.data, self.pos))
            self.pos += 8 * n
        elif kind in (STRSXP, VECSXP):
            values = [self.item() for _ in range(self.length())]
        else:
            raise ValueError(f"R serialization type {kind} is not supported by this reader")
        return RObject(values, self.attributes() if flags & _HAS_ATTR else {})

    def _pairlist(self, flags: int) -> RObject:
        """A pairlist (attribute lists): returned as an RObject whose ``attributes`` are its tagged cells."""
        cells: dict[str, Any] = {}
        while True:
            if flags & _HAS_ATTR:
                self.attributes()
            tag = self.item() if flags & _HAS_TAG else None
            cells[tag if isinstance(tag, str) else str(len(cells))] = self.item()
            flags = self.int()
            if flags & 0xFF != LISTSXP:
                self.pos -= 4
                self.item()  # the terminating NILVALUE (or an improper tail, ignored)
                return RObject(None, cells)


def unserialize(payload: bytes) -> Any:
    """Decode one R object from its XDR serialization bytes."""
    return _XdrReader(payload).item()


def _unwrap(value: Any) -> Any:
    if isinstance(value, RObject):
        return [_unwrap(v) for v in value.value] if isinstance(value.value, list) else value.value
    return value


def _decompress(blob: bytes, compressed: int) -> bytes:
    """One lazy-load record: a 4-byte length, then (R_decompress1) zlib or (R_decompress3) a type byte."""
    if compressed == 1:
        return zlib.decompress(blob[4:])
    kind, body = blob[4:5], blob[5:]
    if kind == b"Z":
        return lzma.decompress(body)
    if kind == b"2":
        return bz2.decompress(body)
    if kind == b"1":
        return zlib.decompress(body)
    return body


def read_lazyload_strings(data_dir: str | Path, prefix: str = "Rdata") -> dict[str, list[str | None]]:
    """Every character vector in ``data_dir/{prefix}.rdx`` + ``.rdb``, by object name, in index order."""
    data_dir = Path(data_dir)
    index = unserialize(gzip.decompress((data_dir / f"{prefix}.rdx").read_bytes()))
    fields = dict(zip(_unwrap(index.attributes["names"]), index.value))
    variables = fields["variables"]
    compressed = int(_unwrap(fields["compressed"])[0])
    database = (data_dir / f"{prefix}.rdb").read_bytes()
    found: dict[str, list[str | None]] = {}
    for name, location in zip(_unwrap(variables.attributes["names"]), variables.value):
        offset, size = _unwrap(location)
        obj = unserialize(_decompress(database[offset : offset + size], compressed))
        if isinstance(obj, RObject) and isinstance(obj.value, list) and all(
            v is None or isinstance(v, str) for v in obj.value
        ):
            found[name] = list(obj.value)
    return found
