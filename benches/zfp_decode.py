"""Decode speed of zshard's zfp decoder against zfpy's own (libzfp 1.0.1), on one 2D float32 array.

    cargo build --release -p zshard-codecs --example zfp_decode
    target/venv/bin/python benches/zfp_decode.py [target/release/examples/zfp_decode]

Prints MB/s of decoded values (best of 5) for each zfp mode; both decoders read the same stream.
"""

import sys
import tempfile
import time
import subprocess
from pathlib import Path

import numpy as np
import zfpy

ROWS, COLS = 2048, 2048
MODES = {"rate 8": {"rate": 8}, "precision 16": {"precision": 16}, "tolerance 1e-3": {"tolerance": 1e-3},
         "reversible": {}}


def main() -> None:
    example = Path(sys.argv[1] if len(sys.argv) > 1 else "target/release/examples/zfp_decode")
    y, x = np.mgrid[0:ROWS, 0:COLS]
    rng = np.random.default_rng(7)
    data = (np.sin(x / 50.0) * np.cos(y / 70.0) * 100 + rng.normal(0, 0.01, (ROWS, COLS))).astype("f4")
    print(f"{ROWS}x{COLS} float32 ({data.nbytes / 1e6:.1f} MB decoded)")
    print(f"{'mode':16} {'stream MB':>9} {'zfpy MB/s':>10} {'zshard MB/s':>12}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, kwargs in MODES.items():
            stream = zfpy.compress_numpy(data, write_header=True, **kwargs)
            best = min(_timed(lambda: zfpy.decompress_numpy(stream)) for _ in range(5))
            path = Path(tmp) / "stream.zfp"
            path.write_bytes(stream)
            ours = subprocess.run([str(example), str(path), str(ROWS), str(COLS), "5"],
                                  check=True, capture_output=True, text=True).stdout.strip()
            print(f"{name:16} {len(stream) / 1e6:9.2f} {data.nbytes / best / 1e6:10.1f} {ours:>12}")


def _timed(f) -> float:
    start = time.perf_counter()
    f()
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
