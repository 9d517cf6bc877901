"""OME-Zarr through zshard (issue 17, points 3 and 4; issue 41: `--ome 0.6`).

Inputs come from ome-zarr-py's own writer: OME-Zarr 0.4 images with a pyramid (`write_image`), label
images (`write_labels`), a plate (`write_plate_metadata`/`write_well_metadata`), the bioformats2raw
layout around an image, and an OME-Zarr 0.5 image. The output is validated with ome-zarr-models' 0.5
models and read back with ome-zarr-py's reader (pixels equal per level to what zarr-python reads from
the source) and tensorstore.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import tensorstore as ts
import zarr
from ome_zarr.format import FormatV04, FormatV05
from ome_zarr.io import parse_url
from ome_zarr.reader import Reader
from ome_zarr.writer import write_image, write_labels, write_plate_metadata, write_well_metadata
from ome_zarr_models.exceptions import ValidationWarning
from ome_zarr_models.v05.bioformats2raw import BioFormats2Raw
from ome_zarr_models.v05.hcs import HCS
from ome_zarr_models.v05.image import Image
from ome_zarr_models.v05.image_label import ImageLabel
from ome_zarr_models.v05.labels import Labels
from ome_zarr_models.v05.well import Well

from conftest import load_json, run_zshard

LEVELS = ["s0", "s1", "s2", "s3", "s4"]
OMERO = {
    "channels": [
        {"label": "DAPI", "color": "0000FF", "active": True,
         "window": {"start": 0, "end": 1000, "min": 0, "max": 1000}},
        {"label": "GFP", "color": "00FF00", "active": True,
         "window": {"start": 0, "end": 1000, "min": 0, "max": 1000}},
    ],
    "rdefs": {"model": "color"},
}


def _pixels(shape=(2, 5, 256, 256)) -> np.ndarray:
    return np.random.default_rng(17).integers(0, 1000, size=shape, dtype=np.uint16)


def _write_image_04(path: Path, labels: bool = True) -> np.ndarray:
    """A czyx image with 5 levels (and a label image), as ome-zarr-py writes OME-Zarr 0.4."""
    fmt = FormatV04()
    data = _pixels()
    root = zarr.group(store=parse_url(str(path), mode="w", fmt=fmt).store, zarr_format=2)
    write_image(data, root, axes="czyx", fmt=fmt, storage_options={"chunks": (1, 5, 64, 64)})
    # Set here, not through write_image: ome-zarr-py 0.16 took metadata={"omero": ...}, 0.21 ignores that
    # and wants an Omero object; the attribute is the same either way.
    root.attrs["omero"] = OMERO
    if labels:
        write_labels((data[0] > 500).astype(np.uint8), root, name="cells", axes="zyx", fmt=fmt,
                     label_metadata={"colors": [{"label-value": 1, "rgba": [255, 0, 0, 255]}]})
    return data


def _convert(zshard_bin: Path, src: Path, dst: Path, *extra) -> str:
    r = run_zshard(zshard_bin, ["convert", src, dst, "--threads", "2", *extra])
    assert r.returncode == 0, r.describe()
    return r.stderr


def _verify(zshard_bin: Path, src: Path, dst: Path, *extra) -> None:
    r = run_zshard(zshard_bin, ["verify", src, dst, "--threads", "2", *extra])
    assert r.returncode == 0, r.describe()


def _attributes(path: Path) -> dict:
    return load_json(path / "zarr.json")["attributes"]


def _validated(model, group):
    """`model` validated from `group` with every ome-zarr-models warning an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", ValidationWarning)
        return model.from_zarr(group)


def _assert_levels_read_back(src: Path, dst: Path, image: str = "") -> None:
    """Every level of the image at `image`, read by ome-zarr-py's reader from the output and by
    tensorstore, equals what zarr-python reads from the source's level, element by element."""
    node = next(iter(Reader(parse_url(str(dst / image)))()))  # the image itself comes first
    paths = [d["path"] for d in _attributes(dst / image)["ome"]["multiscales"][0]["datasets"]]
    assert len(node.data) == len(paths)
    for level, (path, pyramid_level) in enumerate(zip(paths, node.data)):
        expected = zarr.open_array(str(src / image / path), mode="r")[...]
        np.testing.assert_array_equal(np.asarray(pyramid_level), expected, err_msg=f"level {level}")
        store = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(dst / image / path)}},
                        read=True).result()
        np.testing.assert_array_equal(store.read().result(), expected, err_msg=f"tensorstore {path}")


def test_an_image_with_labels_becomes_ome_zarr_0_5(zshard_bin, tmp_path):
    src, dst = tmp_path / "image.ome.zarr", tmp_path / "image-v05.ome.zarr"
    _write_image_04(src)
    _convert(zshard_bin, src, dst)

    source = load_json(src / ".zattrs")
    root = _attributes(dst)
    assert list(root) == ["ome"], root
    assert root["ome"]["version"] == "0.5"
    expected = [{k: v for k, v in m.items() if k != "version"} for m in source["multiscales"]]
    assert root["ome"]["multiscales"] == expected
    assert root["ome"]["omero"] == source["omero"] == OMERO
    image = _validated(Image, zarr.open_group(str(dst), mode="r"))
    assert [d.path for d in image.attributes.ome.multiscales[0].datasets] == LEVELS
    for level in LEVELS:
        assert load_json(dst / level / "zarr.json")["dimension_names"] == ["c", "z", "y", "x"]
        assert load_json(dst / "labels" / "cells" / level / "zarr.json")["dimension_names"] == ["z", "y", "x"]

    labels_source = load_json(src / "labels" / "cells" / ".zattrs")
    label = _attributes(dst / "labels" / "cells")["ome"]
    assert label["image-label"] == {**labels_source["image-label"], "version": "0.5"}
    assert label["image-label"]["colors"] == [{"label-value": 1, "rgba": [255, 0, 0, 255]}]
    _validated(ImageLabel, zarr.open_group(str(dst / "labels" / "cells"), mode="r"))
    labels = _validated(Labels, zarr.open_group(str(dst / "labels"), mode="r"))
    assert labels.attributes.ome.labels == ["cells"]

    _assert_levels_read_back(src, dst)
    _assert_levels_read_back(src, dst, "labels/cells")
    _verify(zshard_bin, src, dst)


def test_keep_copies_the_attributes_as_they_are(zshard_bin, tmp_path):
    src, dst = tmp_path / "image.ome.zarr", tmp_path / "kept.zarr"
    _write_image_04(src)
    _convert(zshard_bin, src, dst, "--ome", "keep")
    assert _attributes(dst) == load_json(src / ".zattrs")
    assert _attributes(dst / "labels" / "cells") == load_json(src / "labels" / "cells" / ".zattrs")
    assert "dimension_names" not in load_json(dst / "s0" / "zarr.json")
    _verify(zshard_bin, src, dst, "--ome", "keep")
    # The kept attributes are not the ones the default conversion writes: verify says which.
    r = run_zshard(zshard_bin, ["verify", src, dst, "--threads", "2"])
    assert r.returncode == 1, r.describe()
    assert 'attribute "ome" differs' in r.stdout + r.stderr, r.describe()


def test_an_ome_zarr_0_5_source_stays_as_it_is(zshard_bin, tmp_path):
    src, dst = tmp_path / "v05.ome.zarr", tmp_path / "out.zarr"
    fmt = FormatV05()
    root = zarr.group(store=parse_url(str(src), mode="w", fmt=fmt).store, zarr_format=3)
    write_image(_pixels(), root, axes="czyx", fmt=fmt, storage_options={"chunks": (1, 5, 64, 64)})
    root.attrs["ome"] = {**root.attrs["ome"], "omero": OMERO}  # as in _write_image_04
    assert zarr.open_group(str(src), mode="r").attrs["ome"]["omero"] == OMERO
    _convert(zshard_bin, src, dst)
    assert _attributes(dst) == _attributes(src)
    for level in LEVELS:
        assert (load_json(dst / level / "zarr.json")["dimension_names"]
                == load_json(src / level / "zarr.json")["dimension_names"] == ["c", "z", "y", "x"])
    _validated(Image, zarr.open_group(str(dst), mode="r"))
    _assert_levels_read_back(src, dst)
    _verify(zshard_bin, src, dst)


def test_a_plate_with_wells_becomes_ome_zarr_0_5(zshard_bin, tmp_path):
    src, dst = tmp_path / "plate.ome.zarr", tmp_path / "plate-v05.ome.zarr"
    fmt = FormatV04()
    root = zarr.group(store=parse_url(str(src), mode="w", fmt=fmt).store, zarr_format=2)
    wells = ["A/1", "B/2"]
    write_plate_metadata(root, ["A", "B"], ["1", "2"], wells, fmt=fmt, field_count=1, name="screen")
    fields = {}
    for n, well in enumerate(wells):
        group = root.require_group(well)
        write_well_metadata(group, [{"path": "0"}], fmt=fmt)
        fields[well] = np.random.default_rng(n).integers(0, 255, size=(64, 64), dtype=np.uint8)
        write_image(fields[well], group.require_group("0"), axes="yx", fmt=fmt,
                    scale_factors=(2,), storage_options={"chunks": (32, 32)})
    _convert(zshard_bin, src, dst)

    plate = _attributes(dst)["ome"]
    assert plate["version"] == "0.5"
    assert plate["plate"] == {**load_json(src / ".zattrs")["plate"], "version": "0.5"}
    hcs = _validated(HCS, zarr.open_group(str(dst), mode="r"))
    assert [w.path for w in hcs.attributes.ome.plate.wells] == wells
    for well in wells:
        attributes = _attributes(dst / well)
        assert attributes["ome"]["well"]["images"] == [{"path": "0"}]
        _validated(Well, zarr.open_group(str(dst / well), mode="r"))
        _validated(Image, zarr.open_group(str(dst / well / "0"), mode="r"))
        assert load_json(dst / well / "0" / "s0" / "zarr.json")["dimension_names"] == ["y", "x"]
        _assert_levels_read_back(src, dst, f"{well}/0")
    _verify(zshard_bin, src, dst)


def test_the_bioformats2raw_layout_keeps_its_ome_xml(zshard_bin, tmp_path):
    # bioformats2raw itself is a Java tool: its layout is made around an image ome-zarr-py writes,
    # as bioformats2raw writes it (root `bioformats2raw.layout`, series `0`, `OME/METADATA.ome.xml`).
    src, dst = tmp_path / "b2r.zarr", tmp_path / "b2r-v05.zarr"
    _write_image_04(src / "0", labels=False)
    (src / ".zgroup").write_text(json.dumps({"zarr_format": 2}))
    (src / ".zattrs").write_text(json.dumps({"bioformats2raw.layout": 3}))
    (src / "OME").mkdir()
    (src / "OME" / ".zgroup").write_text(json.dumps({"zarr_format": 2}))
    (src / "OME" / ".zattrs").write_text(json.dumps({"series": ["0"]}))
    xml = ('<?xml version="1.0" encoding="UTF-8"?>\n<OME xmlns="http://www.openmicroscopy.org/Schemas/OME/2016-06">'
           '<Image ID="Image:0" Name="zshard"><Pixels ID="Pixels:0" DimensionOrder="XYZCT" Type="uint16" '
           'SizeX="256" SizeY="256" SizeZ="5" SizeC="2" SizeT="1"/></Image></OME>\n').encode()
    (src / "OME" / "METADATA.ome.xml").write_bytes(xml)
    _convert(zshard_bin, src, dst)

    assert _attributes(dst) == {"ome": {"version": "0.5", "bioformats2raw.layout": 3}}
    assert _attributes(dst / "OME") == {"ome": {"version": "0.5", "series": ["0"]}}
    assert (dst / "OME" / "METADATA.ome.xml").read_bytes() == xml
    layout = _validated(BioFormats2Raw, zarr.open_group(str(dst), mode="r"))
    assert list(layout.images) == ["0"]
    _assert_levels_read_back(src, dst, "0")
    _verify(zshard_bin, src, dst)


def _plan(zshard_bin: Path, src: Path, dst: Path, *extra) -> dict:
    r = run_zshard(zshard_bin, ["plan", src, dst, "--json", *extra])
    assert r.returncode == 0, r.describe()
    return {a["path"]: a for a in json.loads(r.stdout)["arrays"]}


def test_each_pyramid_level_gets_shapes_from_the_first_level(zshard_bin, tmp_path):
    src, dst = tmp_path / "image.ome.zarr", tmp_path / "levels.zarr"
    _write_image_04(src, labels=False)
    shapes = ["--shard-shape", "1,5,256,256", "--chunk-shape", "1,5,64,64"]
    planned = _plan(zshard_bin, src, dst, *shapes)
    # Shards cover the same region at every level (halved with the resolution), at least one inner
    # chunk; inner chunks keep the first level's shape, past a small level's end too (so that the
    # shapes stay when the image grows, and a rerun brings it up to date: issue 40).
    expected = {
        "s0": ([1, 5, 256, 256], [1, 5, 64, 64]),
        "s1": ([1, 5, 128, 128], [1, 5, 64, 64]),
        "s2": ([1, 5, 64, 64], [1, 5, 64, 64]),
        "s3": ([1, 5, 64, 64], [1, 5, 64, 64]),
        "s4": ([1, 5, 64, 64], [1, 5, 64, 64]),
    }
    for n, level in enumerate(LEVELS):
        a = planned[level]
        assert a["pyramid"] == {"group": "", "level": n}
        assert (a["shard_shape"], a["inner_chunk_shape"]) == expected[level], level
        assert all(s >= c and s % c == 0 for s, c in zip(a["shard_shape"], a["inner_chunk_shape"])), a
    text = run_zshard(zshard_bin, ["plan", src, dst, *shapes])
    assert "  pyramid        level 3 of the multiscale image at the root" in text.stdout, text.describe()

    _convert(zshard_bin, src, dst, *shapes)
    for level in LEVELS:
        sharding = load_json(dst / level / "zarr.json")["codecs"][0]
        assert (load_json(dst / level / "zarr.json")["chunk_grid"]["configuration"]["chunk_shape"],
                sharding["configuration"]["chunk_shape"]) == expected[level]
    _assert_levels_read_back(src, dst)
    _verify(zshard_bin, src, dst)


def test_level_shapes_set_a_level(zshard_bin, tmp_path):
    src, dst = tmp_path / "image.ome.zarr", tmp_path / "levels.zarr"
    _write_image_04(src, labels=False)
    planned = _plan(zshard_bin, src, dst, "--shard-shape", "1,5,256,256", "--chunk-shape", "1,5,64,64",
                    "--level-shapes", "1:2,5,64,128/1,5,32,32")
    assert (planned["s1"]["shard_shape"], planned["s1"]["inner_chunk_shape"]) == ([2, 5, 64, 128], [1, 5, 32, 32])
    assert (planned["s2"]["shard_shape"], planned["s2"]["inner_chunk_shape"]) == ([1, 5, 64, 64], [1, 5, 64, 64])
    _convert(zshard_bin, src, dst, "--level-shapes", "1:2,5,64,128/1,5,32,32")
    s1 = load_json(dst / "s1" / "zarr.json")
    assert s1["chunk_grid"]["configuration"]["chunk_shape"] == [2, 5, 64, 128]
    assert s1["codecs"][0]["configuration"]["chunk_shape"] == [1, 5, 32, 32]
    _assert_levels_read_back(src, dst)

    r = run_zshard(zshard_bin, ["plan", src, dst, "--level-shapes", "5:1,1,1,1"])
    assert r.returncode == 1, r.describe()
    assert "--level-shapes gives shapes for pyramid level 5, but" in r.stderr
    assert "has levels 0 to 4 only" in r.stderr, r.describe()


def test_shapes_by_axis_name_fit_an_image_and_its_labels(zshard_bin, tmp_path):
    """Extents by OME axis name (issue 17, point 5) apply to the czyx image and its zyx labels alike,
    which no positional shape can; the axes not named keep the default rule, and every pyramid level
    derives its shapes from its first level's."""
    src, dst = tmp_path / "image.ome.zarr", tmp_path / "by-name.zarr"
    _write_image_04(src)
    shapes = ["--shard-shape", "c=1,z=5,y=128", "--chunk-shape", "y=64,x=32"]
    r = run_zshard(zshard_bin, ["convert", src, dst, "--shard-shape", "1,5,128,256"])
    assert r.returncode == 1 and "has 4 dimensions, but the array has 3" in r.stderr, r.describe()
    _convert(zshard_bin, src, dst, *shapes)
    image = load_json(dst / "s0" / "zarr.json")
    assert image["dimension_names"] == ["c", "z", "y", "x"]
    assert image["chunk_grid"]["configuration"]["chunk_shape"] == [1, 5, 128, 256]
    assert image["codecs"][0]["configuration"]["chunk_shape"] == [1, 5, 64, 32]
    label = load_json(dst / "labels" / "cells" / "s0" / "zarr.json")
    assert label["dimension_names"] == ["z", "y", "x"]
    assert label["chunk_grid"]["configuration"]["chunk_shape"] == [5, 128, 256]
    assert label["codecs"][0]["configuration"]["chunk_shape"] == [5, 64, 32]
    for level in LEVELS:
        meta = load_json(dst / level / "zarr.json")
        shard = meta["chunk_grid"]["configuration"]["chunk_shape"]
        inner = meta["codecs"][0]["configuration"]["chunk_shape"]
        assert all(s <= max(e, i) for s, e, i in zip(shard, meta["shape"], inner)), (level, meta)
        assert all(s % i == 0 for s, i in zip(shard, inner)), (level, shard, inner)
    _assert_levels_read_back(src, dst)
    _assert_levels_read_back(src, dst, "labels/cells")

    r = run_zshard(zshard_bin, ["plan", src, dst, "--shard-shape", "t=1"])
    assert r.returncode == 1, r.describe()
    assert "no dimension named t" in r.stderr and "c, x, y, z" in r.stderr, r.describe()


def _models_06():
    """ome-zarr-models' 0.6 models (1.8 on today's stack; last year's 1.7 has none: skipped)."""
    pytest.importorskip("ome_zarr_models.v06.image", reason="ome-zarr-models without 0.6 models")
    from ome_zarr_models.v06 import hcs, image, image_label, labels, well

    return image.Image, image_label.ImageLabel, labels.Labels, hcs.HCS, well.Well


def test_an_image_with_labels_and_a_plate_become_ome_zarr_0_6(zshard_bin, tmp_path):
    """`--ome 0.6` (issue 41): a 0.4 image with labels and a 0.4 plate come out as OME-Zarr 0.6, which
    ome-zarr-models' 0.6 models validate; every level reads back as the source's and verifies."""
    Image06, ImageLabel06, Labels06, HCS06, Well06 = _models_06()
    src, dst = tmp_path / "image.ome.zarr", tmp_path / "image-v06.ome.zarr"
    _write_image_04(src)
    _convert(zshard_bin, src, dst, "--ome", "0.6")
    source = load_json(src / ".zattrs")["multiscales"][0]
    root = _attributes(dst)["ome"]
    assert root["version"] == "0.6" and root["omero"] == OMERO
    (multiscale,) = root["multiscales"]
    assert multiscale["coordinateSystems"] == [{"name": "physical", "axes": source["axes"]}]
    for dataset, level in zip(multiscale["datasets"], source["datasets"]):
        # One transformation into the image's coordinate system: the level's scale, then its
        # translation (a sequence of both when there is a translation other than 0).
        (transform,) = dataset["coordinateTransformations"]
        assert transform["input"] == {"path": level["path"]} and transform["output"] == {"name": "physical"}
        written = {t["type"]: t[t["type"]] for t in level["coordinateTransformations"]}
        steps = transform["transformations"] if transform["type"] == "sequence" else [transform]
        made = {t["type"]: t[t["type"]] for t in steps}
        assert made["scale"] == written["scale"]
        assert made.get("translation", [0.0] * 4) == written.get("translation", [0.0] * 4)
        assert (transform["type"] == "sequence") == any(written.get("translation", []))
    image = _validated(Image06, zarr.open_group(str(dst), mode="r"))
    assert [d.path for d in image.attributes.ome.multiscales[0].datasets] == LEVELS
    label = _attributes(dst / "labels" / "cells")["ome"]
    assert "version" not in label["image-label"]
    _validated(ImageLabel06, zarr.open_group(str(dst / "labels" / "cells"), mode="r"))
    _validated(Labels06, zarr.open_group(str(dst / "labels"), mode="r"))
    _assert_levels_read_back(src, dst)
    _assert_levels_read_back(src, dst, "labels/cells")
    _verify(zshard_bin, src, dst, "--ome", "0.6")

    src, dst = tmp_path / "plate.ome.zarr", tmp_path / "plate-v06.ome.zarr"
    fmt = FormatV04()
    root = zarr.group(store=parse_url(str(src), mode="w", fmt=fmt).store, zarr_format=2)
    wells = ["A/1", "B/2"]
    write_plate_metadata(root, ["A", "B"], ["1", "2"], wells, fmt=fmt, field_count=1, name="screen")
    for n, well in enumerate(wells):
        group = root.require_group(well)
        write_well_metadata(group, [{"path": "0"}], fmt=fmt)
        field = np.random.default_rng(n).integers(0, 255, size=(64, 64), dtype=np.uint8)
        write_image(field, group.require_group("0"), axes="yx", fmt=fmt,
                    scale_factors=(2,), storage_options={"chunks": (32, 32)})
    _convert(zshard_bin, src, dst, "--ome", "0.6")
    plate = _attributes(dst)["ome"]
    assert plate["version"] == "0.6"
    expected = {k: v for k, v in load_json(src / ".zattrs")["plate"].items() if k != "version"}
    assert plate["plate"] == expected
    hcs = _validated(HCS06, zarr.open_group(str(dst), mode="r"))
    assert [w.path for w in hcs.attributes.ome.plate.wells] == wells
    for well in wells:
        _validated(Well06, zarr.open_group(str(dst / well), mode="r"))
        _validated(Image06, zarr.open_group(str(dst / well / "0"), mode="r"))
        _assert_levels_read_back(src, dst, f"{well}/0")
    _verify(zshard_bin, src, dst, "--ome", "0.6")
