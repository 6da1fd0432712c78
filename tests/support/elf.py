"""The dynamic section of a shared object, read in pure Python (64-bit little-endian ELF, what the plugin
libraries are): its soname, the libraries it needs and its search paths. Test-only."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

_SHT_DYNAMIC = 6
_DT_NULL, _DT_NEEDED, _DT_SONAME, _DT_RPATH, _DT_RUNPATH = 0, 1, 14, 15, 29


@dataclass(frozen=True)
class Dynamic:
    """The string entries of a dynamic section, in file order."""

    soname: str | None
    needed: list[str] = field(default_factory=list)
    rpath: list[str] = field(default_factory=list)
    runpath: list[str] = field(default_factory=list)


def dynamic_section(path: Path) -> Dynamic:
    """DT_SONAME, DT_NEEDED, DT_RPATH and DT_RUNPATH of the ELF file at ``path``.

    Raises:
        ValueError: not a 64-bit little-endian ELF file, or one without a dynamic section.
    """
    data = Path(path).read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError(f"{path}: not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    dynamic = [s for s in sections if s[1] == _SHT_DYNAMIC]
    if not dynamic:
        raise ValueError(f"{path}: no dynamic section")
    _name, _kind, _flags, _addr, offset, size, link, _info, _align, entsize = dynamic[0]
    strtab = sections[link][4]

    def text(at: int) -> str:
        start = strtab + at
        return data[start:data.index(b"\0", start)].decode()

    entries: dict[int, list[str]] = {_DT_NEEDED: [], _DT_SONAME: [], _DT_RPATH: [], _DT_RUNPATH: []}
    for at in range(offset, offset + size, entsize or 16):
        tag, value = struct.unpack_from("<qQ", data, at)
        if tag == _DT_NULL:
            break
        if tag in entries:
            entries[tag].append(text(value))
    sonames = entries[_DT_SONAME]
    return Dynamic(soname=sonames[0] if sonames else None, needed=entries[_DT_NEEDED],
                   rpath=entries[_DT_RPATH], runpath=entries[_DT_RUNPATH])
