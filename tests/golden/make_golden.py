"""Writes the golden fixtures of zshard's numcodecs support: tiny Zarr v2 arrays written by
zarr-python with each numcodecs compressor and filter, and the values zarr-python reads back.

Run with the pinned environment (zarr 3.1.6, numcodecs 0.16.6, numpy 2.4.6):

    target/venv/bin/python tests/golden/make_golden.py

It replaces tests/golden/fixtures/. For each case NAME there is NAME.zarr/ (the v2 array) and
NAME.npy (what zarr-python reads from it, little-endian, C order). The expected values are read
back rather than taken from the input, so lossy filters (quantize, fixedscaleoffset, astype
narrowing) are checked against what numcodecs decodes. crates/codecs/tests/golden.rs decodes every
case with zshard and compares bit for bit.

fixtures/vectors.json holds codec-level vectors (numcodecs' encoding and decoding of small buffers
for every dtype/astype pair of delta and astype, fixedscaleoffset and quantize variants, and the
checksums, shuffle and packbits at awkward lengths); golden.rs checks zshard's codecs against them
in both directions. The output is deterministic: rerunning the script reproduces the same files.
"""

import lzma
import shutil
import warnings
import zlib
from pathlib import Path

import numcodecs
import numpy as np
import zarr

HERE = Path(__file__).resolve().parent
OUT = HERE / "fixtures"

# Every case: a (9, 7) array in (4, 3) chunks, so edge chunks are partial, unless it says otherwise.
SHAPE, CHUNKS = (9, 7), (4, 3)


def values(dtype, kind="random", shape=SHAPE):
    """Deterministic test values that suit the dtype and the filter."""
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(zlib.crc32(f"{dtype.str}/{kind}/{shape}".encode()))
    n = int(np.prod(shape))
    if dtype.kind == "b":
        a = rng.random(n) < 0.4
    elif kind == "ramp":
        # Slowly increasing: small differences for delta.
        a = np.cumsum(rng.integers(0, 5, n)).astype(dtype)
    elif kind == "around1000":
        a = 1000 + rng.random(n) * 20
    elif kind == "small":
        a = rng.integers(-100, 100, n)
    elif dtype.kind in "iu":
        info = np.iinfo(dtype)
        a = rng.integers(info.min, info.max, n, dtype=dtype.newbyteorder("="), endpoint=True)
    else:
        a = rng.standard_normal(n) * 100
        a[::11] = 0.0
    return np.asarray(a).astype(dtype).reshape(shape)


def case(name, dtype, filters=None, compressor=None, kind="random", order="C", shape=SHAPE, chunks=CHUNKS):
    path = OUT / f"{name}.zarr"
    arr = zarr.create_array(
        str(path),
        shape=shape,
        chunks=chunks,
        dtype=dtype,
        zarr_format=2,
        filters=filters,
        compressors=compressor,
        fill_value=0,
        order=order,
    )
    data = values(dtype, kind, shape)
    with warnings.catch_warnings():
        # Lossy filters make numpy warn about their casts; what they do is what is checked.
        warnings.simplefilter("ignore", RuntimeWarning)
        arr[...] = data
    back = zarr.open_array(str(path), mode="r")[...]
    back = np.ascontiguousarray(back.astype(back.dtype.newbyteorder("<")))
    np.save(OUT / f"{name}.npy", back)


def main():
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    nc = numcodecs

    # Compressors.
    case("bz2_u1", "|u1", compressor=nc.BZ2(level=1))
    case("bz2_i2", "<i2", compressor=nc.BZ2(level=9))
    case("bz2_f8_big_endian", ">f8", compressor=nc.BZ2())
    case("lzma_xz_i4", "<i4", compressor=nc.LZMA())
    case("lzma_xz_sha256_preset9_f4", "<f4", compressor=nc.LZMA(check=lzma.CHECK_SHA256, preset=9))
    case("lzma_xz_check_none_b1", "|b1", compressor=nc.LZMA(check=lzma.CHECK_NONE))
    case("lzma_alone_u2", "<u2", compressor=nc.LZMA(format=lzma.FORMAT_ALONE))
    case(
        "lzma_raw_delta_lzma2_i8",
        "<i8",
        compressor=nc.LZMA(
            format=lzma.FORMAT_RAW,
            filters=[dict(id=lzma.FILTER_DELTA, dist=8), dict(id=lzma.FILTER_LZMA2, preset=1)],
        ),
    )
    case(
        "lzma_raw_lzma1_u4",
        "<u4",
        compressor=nc.LZMA(format=lzma.FORMAT_RAW, filters=[dict(id=lzma.FILTER_LZMA1, preset=6, lc=0, lp=2, pb=2)]),
    )
    case("lz4_u1", "|u1", compressor=nc.LZ4())
    case("lz4_f8_acceleration10", "<f8", compressor=nc.LZ4(acceleration=10))
    case("lz4_i4_big_endian", ">i4", compressor=nc.LZ4())
    case("lz4_b1", "|b1", compressor=nc.LZ4())

    # shuffle
    case("shuffle_f8", "<f8", filters=[nc.Shuffle(elementsize=8)])
    case("shuffle_u2_elementsize4", "<u2", filters=[nc.Shuffle(elementsize=4)], chunks=(4, 4))
    case("shuffle_i4_zlib", "<i4", filters=[nc.Shuffle(elementsize=4)], compressor=nc.Zlib(level=5))
    case("shuffle_elementsize1_i2", "<i2", filters=[nc.Shuffle(elementsize=1)])

    # delta
    case("delta_i4", "<i4", filters=[nc.Delta(dtype="<i4")], kind="ramp")
    case("delta_i2_astype_i1", "<i2", filters=[nc.Delta(dtype="<i2", astype="|i1")], kind="ramp")
    case("delta_u2_astype_u1", "<u2", filters=[nc.Delta(dtype="<u2", astype="|u1")], kind="ramp")
    case("delta_u1_wrapping", "|u1", filters=[nc.Delta(dtype="|u1")])
    case("delta_f8_astype_f4", "<f8", filters=[nc.Delta(dtype="<f8", astype="<f4")])
    case("delta_f2", "<f2", filters=[nc.Delta(dtype="<f2")], kind="small")
    case("delta_i4_big_endian_zstd", ">i4", filters=[nc.Delta(dtype=">i4")], compressor=nc.Zstd(level=3), kind="ramp")
    case("delta_i4_view_of_big_endian", ">i4", filters=[nc.Delta(dtype="<i4")], kind="ramp")
    case("delta_i8_order_f_blosc", "<i8", filters=[nc.Delta(dtype="<i8")], compressor=nc.Blosc(cname="lz4", clevel=5, shuffle=nc.Blosc.SHUFFLE), order="F", kind="ramp")

    # fixedscaleoffset
    case("fixedscaleoffset_f8_astype_u1", "<f8", filters=[nc.FixedScaleOffset(offset=1000, scale=10, dtype="<f8", astype="|u1")], kind="around1000")
    case("fixedscaleoffset_f4_astype_i2", "<f4", filters=[nc.FixedScaleOffset(offset=0.5, scale=100.0, dtype="<f4", astype="<i2")], kind="small")
    case("fixedscaleoffset_f8_astype_f4", "<f8", filters=[nc.FixedScaleOffset(offset=3, scale=7, dtype="<f8", astype="<f4")])
    case("fixedscaleoffset_f4_astype_f2", "<f4", filters=[nc.FixedScaleOffset(offset=1, scale=3, dtype="<f4", astype="<f2")], kind="small")
    case("fixedscaleoffset_i4_astype_i1", "<i4", filters=[nc.FixedScaleOffset(offset=-3, scale=1, dtype="<i4", astype="|i1")], kind="small")
    case("fixedscaleoffset_big_endian_f8_astype_i4", ">f8", filters=[nc.FixedScaleOffset(offset=0, scale=1000, dtype=">f8", astype=">i4")])

    # quantize
    case("quantize_f8_digits3", "<f8", filters=[nc.Quantize(digits=3, dtype="<f8")])
    case("quantize_f8_astype_f4", "<f8", filters=[nc.Quantize(digits=2, dtype="<f8", astype="<f4")])
    case("quantize_f4_astype_f2", "<f4", filters=[nc.Quantize(digits=1, dtype="<f4", astype="<f2")], kind="small")

    # astype
    case("astype_f8_as_f4", "<f8", filters=[nc.AsType(encode_dtype="<f4", decode_dtype="<f8")])
    case("astype_i4_as_i1", "<i4", filters=[nc.AsType(encode_dtype="|i1", decode_dtype="<i4")], kind="small")
    case("astype_f4_as_f2", "<f4", filters=[nc.AsType(encode_dtype="<f2", decode_dtype="<f4")])
    case("astype_i2_as_f4", "<i2", filters=[nc.AsType(encode_dtype="<f4", decode_dtype="<i2")])

    # packbits
    case("packbits_b1_padded", "|b1", filters=[nc.PackBits()])
    case("packbits_b1_whole_bytes", "|b1", filters=[nc.PackBits()], shape=(20,), chunks=(8,))

    # checksums
    case("crc32_u1", "|u1", filters=[nc.CRC32()])
    case("crc32_end_i2", "<i2", filters=[nc.CRC32(location="end")])
    case("adler32_f4", "<f4", filters=[nc.Adler32()])
    case("adler32_end_u8", "<u8", filters=[nc.Adler32(location="end")])
    case("crc32c_i4", "<i4", filters=[nc.CRC32C()])
    case("fletcher32_u1_odd_length", "|u1", filters=[nc.Fletcher32()], chunks=(3, 3))
    case("fletcher32_f8", "<f8", filters=[nc.Fletcher32()], shape=(1000,), chunks=(400,))

    # Chains of filters and a compressor.
    case(
        "chain_delta_shuffle_crc32_lz4",
        "<i4",
        filters=[nc.Delta(dtype="<i4"), nc.Shuffle(elementsize=4), nc.CRC32()],
        compressor=nc.LZ4(),
        kind="ramp",
    )
    case(
        "chain_quantize_astype_bz2",
        "<f8",
        filters=[nc.Quantize(digits=2, dtype="<f8"), nc.AsType(encode_dtype="<f4", decode_dtype="<f8")],
        compressor=nc.BZ2(),
    )

    # numcodecs filters as zarr-python 3 writes them in v3: array->array codecs before `bytes`.
    zn = __import__("zarr.codecs.numcodecs", fromlist=["Delta"])
    v3_case("v3_delta_i4_astype_i2", "<i4", [zn.Delta(dtype="<i4", astype="<i2")], kind="ramp")
    v3_case("v3_fixedscaleoffset_f8_astype_u2", "<f8", [zn.FixedScaleOffset(offset=1000, scale=10, dtype="<f8", astype="<u2")], kind="around1000")
    v3_case("v3_quantize_f4", "<f4", [zn.Quantize(digits=2, dtype="<f4")])
    v3_case("v3_astype_f8_as_f4", "<f8", [zn.AsType(encode_dtype="<f4", decode_dtype="<f8")])
    v3_case("v3_packbits_b1", "|b1", [zn.PackBits()])
    v3_case("v3_delta_then_shuffle_i8", "<i8", [zn.Delta(dtype="<i8")], kind="ramp", bytes_filters=[zn.Shuffle(elementsize=8)])

    # categorize: fixed-length unicode stored as small integers (zarr-python writes it in v2 only).
    categorize_case()

    # Every data type, in both formats, with a fill value other than zero and a chunk never written.
    for fmt in (2, 3):
        for dtype, fill in DTYPE_FILLS:
            if fmt == 3 and dtype.startswith(">"):
                continue  # zarr-python 3 stores v3 arrays little-endian; v2 keeps the byte order
            dtype_case(fmt, dtype, fill)

    write_vectors()
    write_dtype_vectors()

    total = sum(f.stat().st_size for f in OUT.rglob("*") if f.is_file())
    print(f"{len(list(OUT.glob('*.npy')))} fixtures, {total} bytes in {OUT}")


def v3_case(name, dtype, filters, kind="random", bytes_filters=None):
    """A v3 array with numcodecs filters placed before `bytes` (and `bytes_filters` after it)."""
    path = OUT / f"{name}.zarr"
    shape, chunks = (9, 7), (4, 3)
    arr = zarr.create_array(
        str(path), shape=shape, chunks=chunks, dtype=dtype, zarr_format=3, filters=filters,
        compressors=(bytes_filters or []) + [zarr.codecs.ZstdCodec(level=3)], fill_value=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        arr[...] = values(dtype, kind, shape)
    back = zarr.open_array(str(path), mode="r")[...]
    np.save(OUT / f"{name}.npy", np.ascontiguousarray(back))


def categorize_case():
    path = OUT / "categorize_U4_v2.zarr"
    labels = ["red", "gr\u00fcn", "blue"]
    data = np.array([labels[i % 3] if i % 5 else "" for i in range(63)], dtype="<U4").reshape(SHAPE)
    arr = zarr.create_array(
        str(path), shape=SHAPE, chunks=CHUNKS, dtype="<U4", zarr_format=2, fill_value="",
        filters=[numcodecs.Categorize(labels=labels, dtype="<U4", astype="|u1")], compressors=numcodecs.Zlib(level=1),
    )
    arr[...] = data
    np.save(OUT / "categorize_U4_v2.npy", zarr.open_array(str(path), mode="r")[...])


# Every data type zshard reads, with a fill value in the form the specs give for it.
DTYPE_FILLS = [
    ("|b1", True), ("|i1", -3), ("<i2", 7), (">i2", -7), ("<i4", 100000), ("<i8", -(2**40)),
    ("|u1", 255), ("<u2", 65535), ("<u4", 7), (">u8", 2**63), ("<f2", 0.5), ("<f4", float("nan")),
    (">f8", float("-inf")), ("<c8", complex(1, float("nan"))), (">c16", complex(float("inf"), -2)),
    ("<M8[s]", np.datetime64("NaT")), ("<M8[ns]", np.datetime64(12345, "ns")), (">M8[D]", np.datetime64("2001-02-03")),
    ("<m8[10ms]", np.timedelta64("NaT")), ("<m8[h]", np.timedelta64(-5, "h")),
    ("|S5", b"ab"), ("<U4", "zz"), (">U3", "\u00e9"), ("str", "fill"),
]


def dtype_values(dtype, n):
    """n deterministic values of dtype, including the fill value's neighbours and edge cases."""
    rng = np.random.default_rng(zlib.crc32(f"dtype/{dtype}/{n}".encode()))
    if dtype == "str":
        words = ["", "a", "fill", "h\u00e9llo", "\u65e5\u672c\u8a9e", "x" * 40, "tab\tnew\nline", "\U0001f600"]
        return np.array([words[i] for i in rng.integers(0, len(words), n)], dtype=object)
    dt = np.dtype(dtype)
    if dt.kind == "S":
        return np.array([bytes(rng.integers(1, 256, rng.integers(0, dt.itemsize + 1), dtype="u1")) for _ in range(n)], dtype=dt)
    if dt.kind == "U":
        pool = "ab\u00e9\u65e5\U0001f600z"
        return np.array(["".join(rng.choice(list(pool), rng.integers(0, dt.itemsize // 4 + 1))) for _ in range(n)], dtype=dt)
    if dt.kind in "Mm":
        a = rng.integers(-(10**6), 10**6, n).astype("i8")
        a[::4] = np.iinfo("i8").min  # NaT
        return a.view(dt.newbyteorder("=")).astype(dt)
    if dt.kind == "c":
        re, im = rng.standard_normal(n), rng.standard_normal(n)
        a = (re + 1j * im).astype(dt)
        a[1] = complex(float("nan"), 0)
        a[2] = complex(0, float("inf"))
        return a
    if dt.kind == "f":
        a = (rng.standard_normal(n) * 1000).astype(dt)
        a[1], a[2], a[3] = np.nan, np.inf, -0.0
        return a
    return values(dtype, "random", (n,))


def dtype_case(fmt, dtype, fill):
    """A (5, 3) array of dtype in (2, 3) chunks whose last chunk is never written (fill value)."""
    name = f"dtype_v{fmt}_" + dtype.replace("<", "le_").replace(">", "be_").replace("|", "").replace("[", "_").replace("]", "")
    path = OUT / f"{name}.zarr"
    shape, chunks = (5, 3), (2, 3)
    arr = zarr.create_array(
        str(path), shape=shape, chunks=chunks, dtype=str if dtype == "str" else dtype, zarr_format=fmt,
        fill_value=fill, compressors=None if fmt == 2 else [zarr.codecs.ZstdCodec(level=1)],
    )
    arr[:4, :] = dtype_values(dtype, 12).reshape(4, 3)
    back = zarr.open_array(str(path), mode="r")[...]
    if dtype == "str":
        import json

        (OUT / f"{name}.json").write_text(json.dumps([str(x) for x in back.ravel()], ensure_ascii=False))
    else:
        np.save(OUT / f"{name}.npy", np.ascontiguousarray(back))


def v3_compressor(c, dtype):
    """The v3 codec that decodes what numcodecs compressor c wrote (as zshard's v2 reader maps it)."""
    config = c.get_config()
    cid = config.pop("id")
    if cid == "blosc":
        shuffle = {0: "noshuffle", 1: "shuffle", 2: "bitshuffle"}[config["shuffle"]]
        typesize = 1 if dtype == "str" else np.dtype(dtype).itemsize
        return {"name": "blosc", "configuration": {"cname": config["cname"], "clevel": config["clevel"], "shuffle": shuffle, "typesize": typesize, "blocksize": 0}}
    if cid == "zstd":
        return {"name": "zstd", "configuration": {"level": config["level"], "checksum": False}}
    if cid == "gzip":
        return {"name": "gzip", "configuration": {"level": config["level"]}}
    return {"name": f"numcodecs.{cid}", "configuration": config}


def write_dtype_vectors():
    """Every numcodecs compressor (blosc with each cname and shuffle) and the byte filters applied to
    12 elements of every data type, as numcodecs encodes them: fixtures/dtype_vectors.json. Strings
    are first laid out by numcodecs' VLenUTF8, as Zarr v2 and zarr-python's vlen-utf8 do."""
    import json

    nc = numcodecs
    compressors = [nc.Blosc(cname=cn, clevel=5, shuffle=sh) for cn in ["blosclz", "lz4", "lz4hc", "zlib", "zstd"] for sh in (0, 1, 2)]
    compressors += [nc.Zstd(level=3), nc.GZip(level=5), nc.Zlib(level=5), nc.BZ2(level=9), nc.LZMA(), nc.LZ4()]
    out = []
    for dtype, _ in DTYPE_FILLS:
        data = dtype_values(dtype, 12)
        raw = nc.VLenUTF8().encode(data) if dtype == "str" else np.ascontiguousarray(data).tobytes()
        itemsize = 1 if dtype == "str" else np.dtype(dtype).itemsize
        # numcodecs' blosc takes the typesize from the array it compresses.
        source = data if dtype != "str" else raw
        codecs = [(c, v3_compressor(c, dtype)) for c in compressors]
        for f in [nc.Shuffle(elementsize=itemsize), nc.CRC32(), nc.Adler32(), nc.Fletcher32(), nc.CRC32C()]:
            config = f.get_config()
            codecs.append((f, {"name": "numcodecs." + config.pop("id"), "configuration": config}))
        for c, spec in codecs:
            encoded = bytes(c.encode(source))
            back = np.ascontiguousarray(c.decode(encoded)).tobytes()
            assert back == raw, (dtype, spec)
            out.append({"case": f"{spec['name']} {json.dumps(spec['configuration'])} {dtype}", "dtype": dtype, "codec": spec, "decoded": raw.hex(), "encoded": encoded.hex()})
    (OUT / "dtype_vectors.json").write_text(json.dumps(out, separators=(",", ":")))


TYPES = ["|u1", "|i1", "<u2", ">i2", "<u4", "<i4", ">u8", "<i8", "<f2", ">f4", "<f8"]


def vector(codec, data, case_name):
    """One numcodecs codec applied to one buffer: the codec as v3 metadata, the input, what
    numcodecs encodes it to, and what it decodes that to (not the input for lossy filters)."""
    config = codec.get_config()
    name = "numcodecs." + config.pop("id")
    encoded = np.ascontiguousarray(codec.encode(data)).tobytes()
    back = np.ascontiguousarray(codec.decode(encoded)).tobytes()
    return {
        "case": case_name,
        "codec": {"name": name, "configuration": config},
        "input": np.ascontiguousarray(data).tobytes().hex(),
        "encoded": encoded.hex(),
        "decoded": back.hex(),
    }


def decode_vector(codec, encoded, case_name):
    """numcodecs' decoding of an arbitrary encoded buffer (not one its encoder produced), which
    exercises the decoder's arithmetic beyond round trips."""
    config = codec.get_config()
    name = "numcodecs." + config.pop("id")
    encoded = np.ascontiguousarray(encoded).tobytes()
    back = np.ascontiguousarray(codec.decode(encoded)).tobytes()
    return {
        "case": case_name,
        "codec": {"name": name, "configuration": config},
        "encoded": encoded.hex(),
        "decoded": back.hex(),
    }


def element_values(rng, dtype, n, kind):
    """Values of dtype for which every cast numcodecs does is defined in numpy: C leaves float to
    integer casts of out-of-range values undefined, so only integer-only cases get the full range
    (and wrap); "ramp" is non-decreasing, so that differences are small and positive."""
    dtype = np.dtype(dtype)
    native = dtype.newbyteorder("=")
    if kind == "full":
        info = np.iinfo(native)
        return rng.integers(info.min, info.max, n, dtype=native, endpoint=True).astype(dtype)
    if kind == "ramp" and dtype.kind == "f":
        return np.cumsum(rng.random(n) * 5).astype(dtype)
    if kind == "ramp":
        return np.cumsum(rng.integers(0, 6, n)).astype(dtype)
    if dtype.kind == "f":
        return (rng.random(n) * 100).astype(dtype)
    return rng.integers(0, 100, n).astype(dtype)


def write_vectors():
    """Codec-level vectors: every dtype/astype pair of delta and astype, fixedscaleoffset and
    quantize variants, and checksums, shuffle and packbits at awkward lengths. Written to
    fixtures/vectors.json; golden.rs decodes and re-encodes each through zshard's codec."""
    import json

    nc = numcodecs
    rng = np.random.default_rng(2024)
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for d in TYPES:
            for a in TYPES:
                ints = np.dtype(d).kind in "iu" and np.dtype(a).kind in "iu"
                for kind in ["small"] + (["full"] if ints else []):
                    x = element_values(rng, d, 9, kind)
                    out.append(vector(nc.AsType(encode_dtype=a, decode_dtype=d), x, f"astype {d}->{a} {kind}"))
                # Delta decodes in np.result_type(astype, dtype): wrapping only where that is an
                # integer type, otherwise the running sums must stay in range.
                wraps = np.result_type(np.dtype(a), np.dtype(d)).kind in "iu"
                for kind in ["ramp"] + (["full"] if wraps else []):
                    x = element_values(rng, d, 9, kind)
                    try:
                        out.append(vector(nc.Delta(dtype=d, astype=a), x, f"delta {d}->{a} {kind}"))
                    except OverflowError:
                        # numpy 2 refuses a first element that does not fit astype.
                        pass
                # Arbitrary small differences (fractional for floats), decoded only.
                enc = element_values(rng, a, 9, "small") / np.dtype(a).type(20)
                enc = enc.astype(a)
                out.append(decode_vector(nc.Delta(dtype=d, astype=a), enc, f"delta {d}->{a} decode"))
        for d in ["<f2", "<f4", ">f8", "<i4", ">i2"]:
            for a in ["|u1", "<i2", ">i4", "<u8", "<f2", ">f4", "<f8"]:
                for offset, scale in [(10, 10), (10.5, 4.0), (10, 2.5)]:
                    if np.dtype(d).kind != "f" and isinstance(offset, float):
                        continue
                    x = (10.5 + rng.random(9) * 49).astype(d)
                    codec = nc.FixedScaleOffset(offset=offset, scale=scale, dtype=d, astype=a)
                    out.append(vector(codec, x, f"fixedscaleoffset {d}->{a} {offset} {scale}"))
                    enc = element_values(rng, a, 9, "small")
                    out.append(decode_vector(codec, enc, f"fixedscaleoffset {d}->{a} {offset} {scale} decode"))
        for d in ["<f2", ">f4", "<f8"]:
            for a in ["<f2", ">f4", "<f8"]:
                for digits in [0, 1, 3]:
                    x = ((rng.random(9) - 0.5) * 60).astype(d)
                    out.append(vector(nc.Quantize(digits=digits, dtype=d, astype=a), x, f"quantize {d}->{a} {digits}"))
                out.append(decode_vector(nc.Quantize(digits=1, dtype=d, astype=a), x.astype(a), f"quantize {d}->{a} decode"))
        # Lengths around fletcher32's 360-word and adler32's 5552-byte blocks, and odd lengths.
        for n in [0, 1, 2, 3, 7, 8, 9, 721, 1441, 5553]:
            x = rng.integers(0, 256, n, dtype="u1")
            if 0 < n <= 1441:
                # numcodecs' Fletcher32 cannot encode an empty buffer.
                out.append(vector(nc.Fletcher32(), x, f"fletcher32 {n}"))
            out.append(vector(nc.Adler32(location="end"), x, f"adler32 {n}"))
            if n > 1441:
                continue
            out.append(vector(nc.CRC32(), x, f"crc32 {n}"))
            out.append(vector(nc.CRC32C(location="start"), x, f"crc32c {n}"))
            out.append(vector(nc.PackBits(), (x % 3 == 0), f"packbits {n}"))
            y = x[:64]
            for size in [0, 1, 2, 3, 8]:
                if size <= 1 or len(y) % size == 0:
                    out.append(vector(nc.Shuffle(elementsize=size), y, f"shuffle {size} {len(y)}"))
    (OUT / "vectors.json").write_text(json.dumps(out, separators=(",", ":")))


if __name__ == "__main__":
    main()
