"""Writes the SLURM test's input with zarr-python: a 512x384 float32 Zarr v2 array in 64x64 chunks
(blosc zstd + shuffle), with an all-NaN band so some shards hold only the fill value."""
import sys

import numcodecs
import numpy as np
import zarr

path = sys.argv[1]
a = zarr.create_array(store=path, shape=(512, 384), chunks=(64, 64), dtype="float32", zarr_format=2,
                      compressors=numcodecs.Blosc(cname="zstd", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE),
                      fill_value=float("nan"))
values = np.arange(512 * 384, dtype="float32").reshape(512, 384) * np.float32(0.5)
values[:128] = np.nan
a[:] = values
