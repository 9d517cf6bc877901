"""Seeds for `codec_decode` with numcodecs' own pcodec, jenkins_lookup3 and bitround encodings
(the library's seed generator makes the others): `python fuzz/make_pcodec_seeds.py
fuzz/corpus/codec_decode` with numcodecs 0.16 and pcodec 1.1 (tests/interop/requirements.txt).
Each seed is the configuration prefix `parse_chain` reads (data type, shape, flags choosing
`numcodecs.pcodec` in place of `bytes`, the pcodec configuration, optional checksum), then the chunk.
"""

import struct, sys
from pathlib import Path
import numpy as np, numcodecs
from numcodecs.jenkins import jenkins_lookup3
out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
DT = {"i2": 2, "i4": 3, "i8": 4, "u2": 6, "u4": 7, "u8": 8, "f2": 9, "f4": 10, "f8": 11}
MODES = ["auto", "classic"]; DELTAS = ["auto", "none", "try_consecutive", "try_lookback"]
def pcodec_seed(name, dt, shape, level=8, mode=0, delta=0, pages=None, order=None, jenkins=None):
    head = bytes([DT[dt], len(shape)] + [s - 1 for s in shape])
    flags = (3 << 3) | ((1 << 5) if jenkins is not None else 0)
    head += bytes([flags, level, mode, delta])
    head += bytes([0]) if pages is None else bytes([1, pages - 1])
    head += bytes([0]) if order is None else bytes([1, order])
    kw = dict(level=level, mode_spec=MODES[mode], delta_spec=DELTAS[delta])
    if pages is not None: kw["equal_pages_up_to"] = pages
    if order is not None: kw["delta_encoding_order"] = order
    n = int(np.prod(shape))
    data = (np.arange(n) * 3 % 17).astype(dt)
    enc = bytes(numcodecs.PCodec(**kw).encode(data))
    if jenkins is not None:
        head += bytes([0, 9, 4, 3]) + struct.pack("<I", jenkins)
        enc += struct.pack("<I", jenkins_lookup3(np.frombuffer(enc, "u1"), jenkins))
    (out / f"seed-pcodec-{name}").write_bytes(head + enc)
pcodec_seed("i4-3x5", "i4", [3, 5])
pcodec_seed("f8-7-classic-lookback-pages3", "f8", [7], level=5, mode=1, delta=3, pages=3)
pcodec_seed("u2-2x2x2-jenkins", "u2", [2, 2, 2], jenkins=12345)
pcodec_seed("f2-8-consecutive2", "f2", [8], delta=2, order=2)
pcodec_seed("u8-4x3-level0", "u8", [4, 3], level=0)
# bitround (a filter after bytes): float32 [4, 4], keepbits 5.
vals = np.linspace(-3, 3, 16).astype("f4")
head = bytes([10, 2, 3, 3, 1 << 5, 200, 8, 5])
(out / "seed-bitround-f4-4x4").write_bytes(head + numcodecs.BitRound(keepbits=5).encode(vals).tobytes())
