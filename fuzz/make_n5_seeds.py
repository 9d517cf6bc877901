"""Seeds of the `n5_block` fuzz target: blocks written by tensorstore's n5 driver (every compression
it writes), edge blocks with their actual extents as n5-java writes them, a varlength block and an
lz4 (lz4-java LZ4Block) block, each behind the configuration prefix `src/n5.rs` reads.

    target/venv/bin/python fuzz/make_n5_seeds.py   # writes fuzz/corpus/n5_block/
"""

from __future__ import annotations

import gzip
import hashlib
import struct
import tempfile
from pathlib import Path

import numpy as np
import tensorstore as ts

OUT = Path(__file__).resolve().parent / "corpus" / "n5_block"
DATA_TYPES = ["uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64", "float32", "float64"]
# Index in src/n5.rs's COMPRESSIONS -> tensorstore's compression.
TS_COMPRESSIONS = {
    0: {"type": "raw"},
    1: {"type": "gzip"},
    2: {"type": "gzip", "useZlib": True},
    3: {"type": "bzip2"},
    4: {"type": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1},
    5: {"type": "xz"},
    7: {"type": "zstd"},
}
LZ4 = 6


def prefix(dtype: str, block: list[int], compression: int) -> bytes:
    return bytes([DATA_TYPES.index(dtype), len(block) - 1, *(b - 1 for b in block), compression])


def save(seed: bytes) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / hashlib.sha1(seed).hexdigest()).write_bytes(seed)


def header(extents: list[int], mode: int = 0, elements: int | None = None) -> bytes:
    out = struct.pack(">HH", mode, len(extents)) + b"".join(struct.pack(">I", e) for e in extents)
    return out + (struct.pack(">I", elements) if elements is not None else b"")


def xxh32(data: bytes, seed: int) -> int:
    p1, p2, p3, p4, p5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
    mask = 0xFFFFFFFF
    rotl = lambda x, r: ((x << r) | (x >> (32 - r))) & mask  # noqa: E731
    i, n = 0, len(data)
    if n >= 16:
        v = [(seed + p1 + p2) & mask, (seed + p2) & mask, seed, (seed - p1) & mask]
        while i + 16 <= n:
            for k in range(4):
                (lane,) = struct.unpack_from("<I", data, i + 4 * k)
                v[k] = (rotl((v[k] + lane * p2) & mask, 13) * p1) & mask
            i += 16
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & mask
    else:
        h = (seed + p5) & mask
    h = (h + n) & mask
    while i + 4 <= n:
        (lane,) = struct.unpack_from("<I", data, i)
        h = (rotl((h + lane * p3) & mask, 17) * p4) & mask
        i += 4
    while i < n:
        h = (rotl((h + data[i] * p5) & mask, 11) * p1) & mask
        i += 1
    h ^= h >> 15
    h = (h * p2) & mask
    h ^= h >> 13
    h = (h * p3) & mask
    return h ^ (h >> 16)


def lz4_block_stored(data: bytes) -> bytes:
    """One stored (method 0x10) LZ4Block block and the end block, as lz4-java writes them."""
    check = xxh32(data, 0x9747B28C) & 0x0FFFFFFF
    block = b"LZ4Block" + bytes([0x10]) + struct.pack("<iii", len(data), len(data), check) + data
    return block + b"LZ4Block" + bytes([0x10]) + struct.pack("<iii", 0, 0, 0)


def tensorstore_blocks(tmp: Path) -> None:
    for index, compression in TS_COMPRESSIONS.items():
        for dtype, shape, block in (("uint16", [5, 7], [3, 4]), ("float32", [4, 5, 3], [2, 3, 2])):
            path = tmp / f"{index}-{dtype}"
            arr = ts.open(
                {
                    "driver": "n5",
                    "kvstore": {"driver": "file", "path": str(path)},
                    "metadata": {"dimensions": shape, "blockSize": block, "dataType": dtype, "compression": compression},
                },
                create=True,
            ).result()
            arr[...] = np.arange(np.prod(shape), dtype=dtype).reshape(shape)
            # The first block and the far corner block.
            for key in ("0/0" if len(shape) == 2 else "0/0/0", "/".join(str((s - 1) // b) for s, b in zip(shape, block))):
                save(prefix(dtype, block, index) + (path / key).read_bytes())


def hand_written_blocks() -> None:
    # An edge block of 2x1 elements in a 3x4 block (raw and gzip), as n5-java writes it.
    elements = np.array([7, 9], dtype=">u2").tobytes()
    save(prefix("uint16", [3, 4], 0) + header([2, 1]) + elements)
    save(prefix("uint16", [3, 4], 1) + header([2, 1]) + gzip.compress(elements))
    # Varlength mode with the element count.
    save(prefix("int8", [4], 0) + header([4], mode=1, elements=4) + bytes([1, 2, 3, 4]))
    # lz4 (lz4-java LZ4Block, stored).
    data = np.arange(12, dtype=">i4").tobytes()
    save(prefix("int32", [3, 4], LZ4) + header([3, 4]) + lz4_block_stored(data))


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tensorstore_blocks(Path(tmp))
    hand_written_blocks()
    print(f"{len(list(OUT.iterdir()))} seeds in {OUT}")


if __name__ == "__main__":
    main()
