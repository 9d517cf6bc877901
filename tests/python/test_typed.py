"""The typed API: the keywords of each function are the settings the library's options model gives its
command (and every option of the ``zshard`` command is one, and back), values are checked by the extension
as it builds the model, with messages naming the keyword, results are dataclasses, the package ships its
types (``py.typed``, the extension's stub) and ``mypy --strict`` passes on the examples."""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import re
import subprocess
import sys
import typing
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
import zarr

import zshard
from zshard import _zshard
from conftest import EXAMPLES, example

#: The command of each function.
COMMANDS = {
    "convert": zshard.convert,
    "plan": zshard.plan,
    "finalize": zshard.finalize,
    "verify": zshard.verify,
    "ls": zshard.ls,
    "status": zshard.status,
}

#: Flags of the command that are no setting of the library: how the command prints and logs.
FRONT_END_FLAGS = {"help", "quiet", "json", "progress", "log-interval", "verbose"}

#: Flags of a mode the Python function does not offer (none: ``verify --manifest`` is ``manifest=True``).
CLI_ONLY: set[str] = set()

#: Keywords of the functions that are no flag of the command: the progress callback (``convert``).
PYTHON_ONLY = {"progress"}

#: Flags whose keyword is not their name with ``_`` for ``-`` (their keyword defaults to true).
NEGATED = {"no-passthrough": "passthrough", "no-consolidate": "consolidate"}


def zshard_command() -> str:
    """The wheel's ``zshard`` command (or ``ZSHARD_BIN``)."""
    return os.environ.get("ZSHARD_BIN") or str(Path(sys.executable).with_name("zshard"))


def help_flags(command: str) -> dict[str, tuple[str, str]]:
    """The long flags of ``zshard COMMAND --help``, each with its value name (``""`` for none) and its
    description."""
    run = subprocess.run([zshard_command(), command, "--help"], capture_output=True, text=True, check=True)
    flags: dict[str, tuple[str, str]] = {}
    lines = run.stdout.splitlines()
    for at, line in enumerate(lines):
        found = re.match(r"^\s+(?:-\w, )?--([a-z0-9-]+)(?:\.\.\.)?(?: \[?<([^>]*)>\]?)?\s*$", line)
        if found:
            description = []
            for following in lines[at + 1 :]:
                if not following.strip():
                    break
                description.append(following.strip())
            flags[found[1]] = (found[2] or "", " ".join(description))
    assert len(flags) > 10, run.stdout
    return flags


def keywords(function: typing.Callable[..., object]) -> dict[str, inspect.Parameter]:
    return {
        name: p for name, p in inspect.signature(function).parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY
    }


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_of_the_command_is_a_keyword_and_back(command):
    function = COMMANDS[command]
    flags = help_flags(command)
    settings = {
        NEGATED.get(flag, flag.replace("-", "_"))
        for flag in flags
        if flag not in FRONT_END_FLAGS | CLI_ONLY
    }
    python = set(keywords(function)) - PYTHON_ONLY
    assert settings - python == set(), f"options of `zshard {command}` without a keyword of zshard.{command}"
    assert python - settings == set(), f"keywords of zshard.{command} that `zshard {command}` does not take"
    # The values of an enumerated setting are those of its flag (`--ome <upgrade|keep>`).
    hints = typing.get_type_hints(function)
    for name in settings:
        flag = next(f for f in flags if NEGATED.get(f, f.replace("-", "_")) == name)
        literal = [a for a in typing.get_args(hints[name]) if typing.get_origin(a) is typing.Literal]
        value, description = flags[flag]
        if literal and int in typing.get_args(hints[name]):
            # `--pyramid <N|auto>`: a number, or one of the literal's words.
            assert "|".join(map(str, typing.get_args(literal[0]))) == value.replace("N|", ""), (name, value)
        elif literal and "|" in value:
            assert "|".join(map(str, typing.get_args(literal[0]))) == value, (name, value)
        elif literal:
            # `--source-format <KIND>`: the kinds are in its description.
            named = re.findall(r"(?:^|: |, | or )([a-z0-9-]+) \(", description)
            assert list(typing.get_args(literal[0])) == named, (name, description)
        elif "|" in value and "," not in value and "SIZE" not in value:
            pytest.fail(f"--{flag} <{value}> takes one of a few values: {name} should be a Literal")


@pytest.mark.parametrize("command", COMMANDS)
def test_the_keywords_are_the_settings_of_the_model(command):
    """The extension lists the settings of the library's model for each command (``Action::settings``,
    by ``Setting::key``): the function takes exactly those, SRC and DST as ``src`` and ``dst``."""
    function = COMMANDS[command]
    settings = _zshard.settings(command)
    assert len(settings) == len(set(settings)) > 5
    positional = [
        name for name, p in inspect.signature(function).parameters.items() if p.kind is not inspect.Parameter.KEYWORD_ONLY
    ]
    # `status` takes its destination as its one positional; the others take src (and dst).
    assert positional == [{"source": "src", "destination": "dst"}[s] for s in settings if s in ("source", "destination")]
    model = {s for s in settings if s not in ("source", "destination")}
    python = set(keywords(function)) - PYTHON_ONLY
    assert model - python == set(), f"settings of the model without a keyword of zshard.{command}"
    assert python - model == set(), f"keywords of zshard.{command} that the model does not give {command}"


def test_the_extension_refuses_a_setting_its_command_does_not_take(small, tmp_path):
    src, _ = small
    with pytest.raises(TypeError, match=r"^plan\(\) got an unexpected keyword argument 'worker'"):
        _zshard.plan(src, tmp_path / "out.zarr", {"worker": "0/2"})
    with pytest.raises(TypeError, match=r"^ls\(\) got an unexpected keyword argument 'shard_shape'"):
        _zshard.ls(src, {"shard_shape": (1, 2)})
    assert not (tmp_path / "out.zarr").exists()


@pytest.mark.parametrize("command", COMMANDS)
def test_signatures_are_explicit_typed_and_documented(command):
    function = COMMANDS[command]
    parameters = inspect.signature(function).parameters
    assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    hints = typing.get_type_hints(function)
    doc = inspect.getdoc(function) or ""
    for name, p in keywords(function).items():
        assert p.default is None, name
        assert name in hints and type(None) in typing.get_args(hints[name]), name
        assert re.search(rf"^{name} : .+, optional$", doc, re.M), f"zshard.{command} does not document {name}"


def parameter_docs(function: typing.Callable[..., object]) -> dict[str, str]:
    doc = inspect.getdoc(function) or ""
    found = re.findall(r"^(\w+) : (.*)\n((?:    .*\n?)+)", doc, re.M)
    return {name: kind + " " + " ".join(text.split()) for name, kind, text in found}


def test_a_keyword_has_one_type_and_one_description_everywhere():
    seen: dict[str, tuple[str, str, str]] = {}
    for command, function in COMMANDS.items():
        annotations = {n: str(p.annotation) for n, p in inspect.signature(function).parameters.items()}
        for name, text in parameter_docs(function).items():
            if name in ("src", "dst"):
                # The positionals: verify's dst is optional (manifest=True), status's is its only one.
                continue
            if name in seen:
                assert (annotations[name], text) == seen[name][1:], (name, command, seen[name][0])
            else:
                seen[name] = (command, annotations[name], text)


def test_the_functions_are_what_generate_api_makes():
    run = subprocess.run(
        [sys.executable, str(EXAMPLES.parent / "generate_api.py"), "--check"], capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stderr


def test_the_result_classes_are_what_generate_results_makes():
    """``_results.py`` is what ``generate_results.py`` makes of the Rust result types' schema (which
    ``crates/convert/tests/result_schema.rs`` keeps equal to the types)."""
    run = subprocess.run(
        [sys.executable, str(EXAMPLES.parent / "generate_results.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr


def test_one_keyword_per_setting_no_negated_twin(small, tmp_path):
    """``passthrough=False`` and ``consolidate=False`` are the flags ``--no-passthrough`` and
    ``--no-consolidate``; there is no ``no_passthrough`` or ``no_consolidate`` keyword."""
    src, _ = small
    for twin in ("no_passthrough", "no_consolidate"):
        with pytest.raises(TypeError, match=f"unexpected keyword argument '{twin}'"):
            zshard.plan(src, tmp_path / "out.zarr", **{twin: True})


def test_the_wheel_ships_its_types():
    package = resources.files("zshard")
    assert package.joinpath("py.typed").is_file()
    stub = package.joinpath("_zshard.pyi")
    assert stub.is_file()
    text = stub.read_text()
    assert all(f"def {name}(" in text for name in (*COMMANDS, "settings", "cli_main")), text


def test_mypy_strict_passes_on_the_examples():
    files = sorted(str(p) for p in EXAMPLES.glob("*.py"))
    assert any(f.endswith("typed_options.py") for f in files)
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", os.devnull, *files],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_mypy_strict_passes_on_the_package():
    package = EXAMPLES.parent / "python" / "zshard"
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", os.devnull, str(package)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_mypy_strict_refuses_ill_typed_keywords(tmp_path):
    wrong = tmp_path / "wrong.py"
    wrong.write_text(
        "import zshard\n"
        "zshard.convert('a', 'b', shard_shape=(512.5, 512))\n"
        "zshard.convert('a', 'b', index_location='middle')\n"
        "zshard.plan('a', 'b', memory_limit=[1])\n"
        "zshard.verify('a', 'b', shard_shape=(1, 2))\n"
        "zshard.ls('a', shard_shap=(1, 2))\n"
    )
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", os.devnull, str(wrong)],
        capture_output=True,
        text=True,
        check=False,
    )
    errors = [line for line in run.stdout.splitlines() if ": error:" in line]
    assert sorted({int(line.split(":")[1]) for line in errors}) == [2, 3, 4, 5, 6], run.stdout


def test_the_extension_stub_matches_the_extension():
    run = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "zshard._zshard"], capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        # Issue 31, row 18: these gave "cannot be used multiple times", "unexpected argument '-1'", and
        # memory_limit=[1] was taken as 1 byte.
        ({"shard_shape": (512.5, 512)}, TypeError, "shard_shape: extents are ints, got float 512.5"),
        ({"threads": -1}, ValueError, "threads must be at least 1, got -1"),
        ({"memory_limit": [1]}, TypeError, "memory_limit: a size is an int (bytes) or a str such as '4GiB', got list [1]"),
        ({"chunk_shape": "10,10"}, TypeError, "chunk_shape: a shape is a sequence of ints or a mapping"),
        ({"chunk_shape": {"y": 0}}, ValueError, "chunk_shape: extents are at least 1, got 0"),
        ({"chunk_shape": ()}, ValueError, "chunk_shape: a shape has at least one extent"),
        ({"threads": True}, TypeError, "threads: an int, got bool True"),
        ({"threads": 2.0}, TypeError, "threads: an int, got float 2.0"),
        ({"io_threads": 0}, ValueError, "io_threads must be at least 1, got 0"),
        ({"retries": -2}, ValueError, "retries must be at least 0, got -2"),
        ({"index_location": "middle"}, ValueError, "index_location is one of 'start', 'end', got 'middle'"),
        ({"ome": 1}, TypeError, "ome: one of 'upgrade', 'keep', '0.6', got int 1"),
        ({"overwrite": 1}, TypeError, "overwrite: a bool, got int 1"),
        ({"include": ["a", 3]}, TypeError, "include: items are str, got int 3"),
        ({"worker": (2, 2)}, ValueError, "worker: index 2 is not in 0..2"),
        ({"worker": [0, 2]}, TypeError, "worker: (index, count) or 'index/count', got list [0, 2]"),
        ({"report": 3}, TypeError, "report: a path is a str or a pathlib.Path, got int 3"),
        ({"compressor": 3}, TypeError, "compressor: a spec such as 'zstd:3' or a list of Zarr v3 codecs, got int 3"),
        ({"memory_limit": -1}, ValueError, "memory_limit must not be negative, got -1"),
        ({"checkpoint_interval": True}, TypeError,
         "checkpoint_interval: a number of seconds (int or float) or a str such as '10s', got bool True"),
        ({"checkpoint_interval": 0}, ValueError,
         "invalid value 0 for 'checkpoint_interval': checkpoint_interval= is a duration from 10ms to 1h"),
        ({"checkpoint_interval": "2h"}, ValueError,
         "invalid value '2h' for 'checkpoint_interval': checkpoint_interval= is a duration from 10ms to 1h"),
        ({"checkpoint_interval": "soon"}, ValueError,
         "invalid value 'soon' for 'checkpoint_interval': checkpoint_interval= takes a duration such as 10s"),
    ],
)
def test_values_are_checked_at_the_edge_naming_the_keyword(small, tmp_path, options, error, message):
    src, _ = small
    with pytest.raises(error) as raised:
        zshard.convert(src, tmp_path / "out.zarr", **options)
    assert str(raised.value).startswith(message), str(raised.value)
    if error is ValueError:
        assert isinstance(raised.value, zshard.OptionsError)
    assert not (tmp_path / "out.zarr").exists()


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        # Issue 31, row 18, at the extension itself (no Python check in front of it): these values went
        # through a command line and clap ("cannot be used multiple times", "unexpected argument '-1'",
        # memory_limit=[1] taken as 1 byte).
        ({"shard_shape": (512.5, 512)}, TypeError, "shard_shape: extents are ints, got float 512.5"),
        ({"threads": -1}, ValueError, "threads must be at least 1, got -1"),
        ({"memory_limit": [1]}, TypeError, "memory_limit: a size is an int (bytes) or a str such as '4GiB', got list [1]"),
    ],
)
def test_the_extension_checks_values_as_it_builds_the_model(small, tmp_path, options, error, message):
    src, _ = small
    for call in (
        lambda: _zshard.plan(src, tmp_path / "out.zarr", options),
        lambda: _zshard.convert(src, tmp_path / "out.zarr", options, None),
    ):
        with pytest.raises(error) as raised:
            call()
        assert str(raised.value) == message
    assert not (tmp_path / "out.zarr").exists()


@pytest.mark.parametrize(("given", "seconds"), [(None, 10.0), (0.25, 0.25), ("500ms", 0.5), ("2m", 120.0)])
def test_the_checkpoint_interval_reaches_the_run(small, tmp_path, given, seconds):
    """``checkpoint_interval=`` (seconds or a duration) is the run's: its report says so, as does the
    command's report for ``--checkpoint-interval`` and a job file's ``checkpoint_interval``."""
    src, _ = small
    report = zshard.convert(src, tmp_path / "py.zarr", shard_shape=(20, 40), checkpoint_interval=given)
    assert report.document["options"]["checkpoint_interval_seconds"] == seconds
    flags = [] if given is None else ["--checkpoint-interval", str(given)]
    cli_report = tmp_path / "cli.json"
    subprocess.run([zshard_command(), "convert", str(src), str(tmp_path / "cli.zarr"), "--shard-shape", "20,40",
                    "--quiet", "--report", str(cli_report), *flags], check=True)
    assert json.loads(cli_report.read_text())["options"]["checkpoint_interval_seconds"] == seconds
    job = tmp_path / "job.toml"
    key = "" if given is None else f"checkpoint_interval = {json.dumps(given)}\n"
    job_report = tmp_path / "job.json"
    job.write_text(f'report = "{job_report}"\n{key}[[conversions]]\nsource = "{src}"\n'
                   f'destination = "{tmp_path / "job.zarr"}"\nshard_shape = [20, 40]\n')
    subprocess.run([zshard_command(), "run", str(job), "--quiet"], check=True)
    assert json.loads(job_report.read_text())["options"]["checkpoint_interval_seconds"] == seconds


def test_the_share_of_a_slurm_array_task_is_converted(small, tmp_path, monkeypatch):
    src, _ = small
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "3")
    monkeypatch.setenv("SLURM_ARRAY_TASK_MIN", "2")
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "2")
    report = zshard.convert(src, tmp_path / "out.zarr", shard_shape=(20, 40))
    assert report.worker == (1, 2)
    # A partitioned run writes no metadata: finalize does, once every worker is done.
    assert not (tmp_path / "out.zarr" / "zarr.json").exists()


def test_errors_from_the_library_name_keywords_not_flags(small, tmp_path):
    src, _ = small
    with pytest.raises(zshard.OptionsError, match="^invalid value 'lots' for 'memory_limit'"):
        zshard.plan(src, tmp_path / "out.zarr", memory_limit="lots")
    with pytest.raises(zshard.OptionsError) as raised:
        zshard.convert(src, tmp_path / "out.zarr", level_shapes=["x"])
    assert "level_shapes" in str(raised.value) and "--level-shapes" not in str(raised.value), raised.value


def test_sample_is_checked_at_the_edge(small, tmp_path):
    src, _ = small
    with pytest.raises(zshard.OptionsError, match=re.escape(r"sample is a fraction in (0, 1], got 2")):
        zshard.verify(src, tmp_path / "out.zarr", sample=2)


def test_numpy_integers_are_extents(small, tmp_path):
    src, data = small
    dst = tmp_path / "out.zarr"
    zshard.convert(src, dst, shard_shape=np.array([20, 40]), chunk_shape=(np.int64(10), 10), threads=np.int32(1))
    assert zarr.open_array(str(dst), mode="r").shards == (20, 40)
    np.testing.assert_array_equal(zarr.open_array(str(dst), mode="r")[...], data)


def test_passthrough_false_decodes_every_chunk_as_no_passthrough_did(small, tmp_path):
    src, data = small
    given = {"shard_shape": (20, 40), "compressor": "source"}
    assert zshard.plan(src, tmp_path / "a.zarr", **given).arrays[0].passthrough
    assert not zshard.plan(src, tmp_path / "a.zarr", passthrough=False, **given).arrays[0].passthrough
    cli = subprocess.run(
        [zshard_command(), "plan", str(src), str(tmp_path / "a.zarr"), "--shard-shape", "20,40"]
        + ["--compressor", "source", "--no-passthrough", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert '"passthrough": false' in cli.stdout
    zshard.convert(src, tmp_path / "new.zarr", passthrough=False, consolidate=False, **given)
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "new.zarr"), mode="r")[...], data)


def test_ls_lists_the_arrays_of_a_group(tmp_path):
    src = tmp_path / "group.zarr"
    group = zarr.open_group(str(src), mode="w", zarr_format=2)
    group.create_array("a", shape=(100, 80), chunks=(10, 20), dtype="i4")
    group.create_group("sub").create_array("b", shape=(7,), chunks=(7,), dtype="f8")
    listing = zshard.ls(src)
    assert listing.source.endswith("group.zarr")
    assert [a.path for a in listing.arrays] == ["a", "sub/b"]
    a = listing.arrays[0]
    assert (a.shape, a.chunk_shape, a.shard_shape, a.data_type) == ([100, 80], [10, 20], None, "int32")
    assert listing.groups == ["", "sub"]
    assert zshard.ls(src, include="sub/*").arrays[0].path == "sub/b"
    with pytest.raises(zshard.OptionsError, match="matches no array"):
        zshard.ls(src, include=["nothing*"])


def test_plan_is_a_plan_dataclass(small, tmp_path):
    src, _ = small
    plan = zshard.plan(src, tmp_path / "out.zarr", shard_shape=[20, 40], memory_limit=2**30, threads=2)
    assert isinstance(plan, zshard.Plan) and dataclasses.is_dataclass(plan)
    (array,) = plan.arrays
    assert (plan.threads, plan.memory_limit, plan.totals.shards, plan.totals.arrays) == (2, 2**30, array.shards, 1)
    assert (array.shard_shape, array.inner_chunk_shape, array.shards) == ([20, 40], [10, 10], 10)
    assert plan.document["arrays"][0]["shard_shape"] == array.shard_shape
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.threads = 3  # type: ignore[misc]


def test_the_typed_example_converts_and_verifies(small, tmp_path):
    src, data = small
    result = example("typed_options").shard(str(src), str(tmp_path / "typed.zarr"))
    assert result.ok and result.shards_checked == 40
    output = zarr.open_array(str(tmp_path / "typed.zarr"), mode="r")
    assert output.shards == (20, 10)
    np.testing.assert_array_equal(output[...], data)


def test_the_command_and_the_functions_each_keep_their_spelling(small, tmp_path, capfd):
    """The command run from Python names settings by its flags, the functions beside it by their
    keywords, on any thread (no spelling is kept for the process)."""
    import threading

    src, _ = small
    dst = str(tmp_path / "out.zarr")
    assert _zshard.cli_main(["convert", str(src), dst, "--checkpoint-interval", "0"]) == 2
    assert "--checkpoint-interval is a duration" in capfd.readouterr().err
    raised: list[BaseException] = []

    def convert() -> None:
        try:
            zshard.convert(src, dst, checkpoint_interval=0)
        except zshard.OptionsError as e:
            raised.append(e)

    convert()
    thread = threading.Thread(target=convert)
    thread.start()
    thread.join()
    assert len(raised) == 2
    assert all("checkpoint_interval= is a duration" in str(e) for e in raised), raised


def test_the_result_classes_are_the_documents_the_library_returns(small, tmp_path):
    """Every field of a result dataclass is a key of the document the library returns for it (the
    Rust types, serialized), and every key of the document is a field, so that neither drifts: a
    field the document lost would read as ``None``. A :class:`Report` keeps the run's details in
    ``document`` only; ``Plan.icechunk_chunks`` is given for an Icechunk output alone. (The classes
    are generated from the types' schema, ``generate_results.py``: this checks the documents the
    extension hands over, and a class left out of ``omit`` or ``only`` in the generator.)"""
    from zshard import _results

    src, _ = small
    dst = tmp_path / "out.zarr"
    report = _zshard.convert(src, dst, {"shard_shape": [20, 40]}, None)
    plan = _zshard.plan(src, tmp_path / "p.zarr", {})
    status = _zshard.status(dst, {})
    documents = [
        (_results.Report, report, {"document"}, True),
        (_results.Counts, report["totals"], set(), False),
        (_results.Plan, plan, {"document", "icechunk_chunks"}, False),
        (_results.PlannedArray, plan["arrays"][0], set(), False),
        (_results.PlanCost, plan["cost"], set(), False),
        (_results.PlanRequests, plan["cost"]["source_requests"], set(), False),
        (_results.PlanStateRequests, plan["cost"]["state_requests"], set(), False),
        (_results.PlanEstimate, plan["estimate"], set(), False),
        (_results.PlanAssumptions, plan["estimate"]["assumptions"], set(), False),
        (_results.PlanPrices, plan["estimate"]["assumptions"]["prices"], set(), False),
        (_results.Listing, _zshard.ls(src, {}), set(), False),
        (_results.ListedArray, _zshard.ls(src, {})["arrays"][0], set(), False),
        (_results.Status, status, set(), False),
        (_results.ArrayStatus, status["arrays"][0], set(), False),
        (_results.StatusTotals, status["totals"], set(), False),
        (_results.VerifyResult, _zshard.verify(src, dst, {}), set(), False),
        (_results.Finalized, _zshard.finalize(src, dst, {"shard_shape": [20, 40]}), set(), False),
    ]
    for cls, document, own, partial in documents:
        fields = set(cls.__dataclass_fields__)
        assert fields - own <= set(document), (cls.__name__, fields - own - set(document))
        if not partial:
            assert set(document) <= fields, (cls.__name__, set(document) - fields)
