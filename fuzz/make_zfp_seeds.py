"""Seeds for `codec_decode` with zfpy's own streams (numcodecs' ZFPY writes exactly these):
`python fuzz/make_zfp_seeds.py fuzz/corpus/codec_decode` with zfpy 1.0.1 and numpy
(tests/interop/requirements.txt). Each seed is the prefix `parse_chain` reads (data type, shape,
flags choosing serializer 2, which is `numcodecs.zfpy` for int32, int64, float32 and float64), then
the stream: every mode, type and dimensionality the prefix can describe (extents up to 8).
"""

import sys
from pathlib import Path

import numpy as np
import zfpy

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
DT = {"i4": 3, "i8": 4, "f4": 10, "f8": 11}
SHAPES = [(7,), (5, 7), (3, 5, 6)]
MODES = {"rate": {"rate": 6}, "precision": {"precision": 10}, "tolerance": {"tolerance": 0.01}, "reversible": {}}
for dt, code in DT.items():
    for shape in SHAPES:
        for mode, kwargs in MODES.items():
            head = bytes([code, len(shape)] + [s - 1 for s in shape] + [2 << 3])
            grid = np.indices(shape).sum(axis=0)
            data = (np.sin(grid / 2.0) * 50).astype(dt)
            stream = zfpy.compress_numpy(data, write_header=True, **kwargs)
            (out / f"seed-zfpy-{dt}-{'x'.join(map(str, shape))}-{mode}").write_bytes(head + stream)
