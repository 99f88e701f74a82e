"""Bad input at every door, property-tested: whatever arrives, the validation function either
accepts it or raises ValueError (FileNotFoundError for a missing file) in one line that names
the input. The functions are called directly (no subprocess per example); a few CLI tests at
the end check exit 2, one line and no run folder end to end."""

import dataclasses
import json
import math
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spotlight.cli import main
from spotlight.config import Config
from spotlight.overrides import apply_overrides
from spotlight.prompts import read_prompt_file
from spotlight.recipes import RECIPES, get_recipe
from spotlight.scheduling.capacity import node_types
from spotlight.scheduling.traces import load_trace
from spotlight.tasks import base_checkpoint
from spotlight.training.run_folder import preflight_run, read_checkpoint_state

PROPERTY = settings(
    max_examples=60,
    deadline=None,
    database=None,  # no .hypothesis folder in the repository
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

JSON = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=10,
)
"""Any JSON document (NaN and infinities included: Python's json writes and reads them)."""


def refused_in_one_line(call, name: str) -> BaseException | None:
    """Run ``call``; None when it accepts, else the error, checked to be a ValueError or
    FileNotFoundError whose message is one line naming ``name``."""
    try:
        call()
    except (ValueError, FileNotFoundError) as e:
        assert "\n" not in str(e), str(e)
        assert name in str(e), (name, str(e))
        return e
    return None


def _fields(obj, prefix=""):
    out = []
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            out += _fields(value, f"{prefix}{f.name}.")
        else:
            out.append(f"{prefix}{f.name}")
    return out


BASE = get_recipe("tiny-ocr")
KEYS = _fields(BASE)
VALUES = st.one_of(
    st.sampled_from(["nan", "inf", "-inf", "-1", "0", "1e30", "true", "none", "{}", "x", ""]),
    st.integers(-(10**6), 10**6).map(str),
    st.floats().map(repr),
    st.text(max_size=8),
)


@PROPERTY
@given(key=st.sampled_from(KEYS) | st.text(max_size=12), value=VALUES)
def test_set_overrides_are_accepted_whole_or_refused_naming_the_key(key, value):
    """Unknown keys, wrong types, out-of-range values: one line naming the key; what passes
    holds only finite numbers."""
    box = {}

    def apply():
        box["cfg"] = apply_overrides(BASE, [f"{key}={value}"])
        box["cfg"].validate()

    leaf = key.split(".")[-1]
    if refused_in_one_line(apply, leaf if key in KEYS else "--set") is not None:
        return
    value_set = box["cfg"]
    for part in key.split("."):
        value_set = getattr(value_set, part)
    assert not (isinstance(value_set, float) and not math.isfinite(value_set))


def test_nan_passes_no_range_check_any_more():
    """nan <= 0 is False: a NaN learning rate passed every check before the parse refused it."""
    for item in ("grpo.learning_rate=nan", "grpo.clip_range=inf", "max_wall_s=-inf"):
        with pytest.raises(ValueError, match=r"not a valid finite float"):
            apply_overrides(BASE, [item])


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_every_recipe_validates_and_survives_its_config_json(name):
    cfg = get_recipe(name)
    cfg.validate()
    assert Config.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg


@PROPERTY
@given(doc=JSON | st.binary(max_size=40) | st.fixed_dictionaries({"train": JSON, "val": JSON}))
def test_prompt_files_are_read_whole_or_refused_naming_the_file(tmp_path, doc):
    path = tmp_path / "prompts.json"
    path.write_bytes(doc if isinstance(doc, bytes) else json.dumps(doc).encode())
    box = {}
    if refused_in_one_line(lambda: box.update(p=read_prompt_file(str(path))), str(path)) is None:
        train, val = box["p"]
        assert train and val and all(isinstance(p, str) and p.strip() for p in train + val)


SKYPILOT = st.fixed_dictionaries(
    {
        "metadata": st.fixed_dictionaries({"gap_seconds": st.floats() | st.integers(-5, 600)}),
        "data": st.lists(st.integers(-2, 6) | st.floats(), max_size=6),
    }
)
ROWS = st.lists(
    st.tuples(
        st.integers(-(10**4), 10**7) | st.text(max_size=3),
        st.sampled_from(["add", "remove", "drop"]),
        st.sampled_from(["a", "b", "c"]),
    ),
    max_size=8,
)


@PROPERTY
@given(
    doc=JSON | SKYPILOT | st.binary(max_size=40),
    rows=ROWS.map(lambda rs: "".join(f"{t},{op},{n}\n" for t, op, n in rs).encode())
    | st.binary(max_size=40),
)
def test_spot_traces_are_read_whole_or_refused_naming_the_file(tmp_path, doc, rows):
    """Malformed JSON or CSV, empty, no capacity, times out of order: refused, naming the file;
    what is read has increasing times and some capacity."""
    for path, data in (
        (tmp_path / "trace.json", doc if isinstance(doc, bytes) else json.dumps(doc).encode()),
        (tmp_path / "trace.csv", rows),
    ):
        path.write_bytes(data)
        box: dict = {}
        if refused_in_one_line(lambda p=path, b=box: b.update(t=load_trace(p)), str(path)) is None:
            trace = box["t"]
            assert trace.max_count > 0 and list(trace.times_s) == sorted(set(trace.times_s))
            assert all(math.isfinite(t) for t in trace.times_s)


def test_csv_times_out_of_order_name_the_line(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("0,add,a\n5000,add,b\n4000,remove,a\n")
    with pytest.raises(ValueError, match=rf"^{path}:3: time goes backwards$"):
        load_trace(path)


NODE_TYPE = st.fixed_dictionaries(
    {},
    optional={
        "max_workers": st.integers(-2, 4) | st.floats() | st.text(max_size=2) | st.booleans(),
        "resources": st.dictionaries(
            st.sampled_from(["sampler_gpu", "trainer_gpu", "spot"]),
            st.integers(-2, 8) | st.floats() | st.text(max_size=2),
        )
        | JSON,
    },
)


@PROPERTY
@given(
    config=st.fixed_dictionaries(
        {"available_node_types": st.dictionaries(st.text(max_size=4), NODE_TYPE | JSON)},
        optional={"max_workers": st.integers(-2, 30) | JSON, "head_node_type": st.text(max_size=4)},
    )
    | JSON
)
def test_cluster_configs_are_read_whole_or_refused_naming_the_file(config):
    box = {}
    if refused_in_one_line(lambda: box.update(t=node_types(config, "c.yaml")), "c.yaml") is None:
        for t in box["t"]:
            assert t.max_nodes >= 0
            assert all(0 <= v < math.inf for v in t.resources.values())


OCR_MINI = Path(base_checkpoint("ocr-mini")).read_bytes()


def _with_header(header: dict) -> bytes:
    """The OCR-mini base checkpoint with another safetensors header (the same tensor bytes)."""
    size = struct.unpack("<Q", OCR_MINI[:8])[0]
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    return struct.pack("<Q", len(head)) + head + OCR_MINI[8 + size :]


def _header() -> dict:
    size = struct.unpack("<Q", OCR_MINI[:8])[0]
    return json.loads(OCR_MINI[8 : 8 + size])


def _preflight(tmp_path, data: bytes):
    path = tmp_path / "start.safetensors"
    path.write_bytes(data)
    cfg = dataclasses.replace(BASE, policy=dataclasses.replace(BASE.policy, checkpoint=str(path)))
    return path, lambda: preflight_run(cfg, tmp_path / "out", False)


@PROPERTY
@given(cut=st.integers(0, len(OCR_MINI) - 1))
def test_a_truncated_starting_checkpoint_is_refused_naming_it(tmp_path, cut):
    path, call = _preflight(tmp_path, OCR_MINI[:cut])
    assert refused_in_one_line(call, str(path)) is not None


@PROPERTY
@given(
    field=st.sampled_from(["height", "width", "channels", "num_layers", "head_dim", "bogus"]),
    value=st.integers(-2, 99) | st.text(max_size=3) | st.none(),
)
def test_a_starting_checkpoint_whose_architecture_was_edited_is_refused(tmp_path, field, value):
    """Metadata that is no tiny config, or one its tensors do not have (wrong shapes), or
    another task's images: refused from the header, before any model is built."""
    header = _header()
    config = json.loads(header["__metadata__"]["config"])
    if config.get(field) == value:
        return
    header["__metadata__"]["config"] = json.dumps({**config, field: value})
    path, call = _preflight(tmp_path, _with_header(header))
    assert refused_in_one_line(call, str(path)) is not None


def test_tensor_shapes_that_differ_from_the_architecture_are_named(tmp_path):
    header = _header()
    name = next(k for k, v in header.items() if k != "__metadata__" and len(v["shape"]) == 2)
    rows, cols = header[name]["shape"]
    header[name]["shape"] = [cols, rows]  # the same bytes, transposed
    _, call = _preflight(tmp_path, _with_header(header))
    with pytest.raises(ValueError, match=rf"tensor {name} is \({cols}, {rows}\)"):
        call()


@PROPERTY
@given(doc=JSON | st.binary(max_size=30))
def test_a_resumed_runs_state_json_is_read_whole_or_refused(tmp_path, doc):
    ckpt = tmp_path / "checkpoint"
    ckpt.mkdir(exist_ok=True)
    (ckpt / "policy.safetensors").write_bytes(b"weights")
    data = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    (ckpt / "state.json").write_bytes(data)
    err = refused_in_one_line(lambda: read_checkpoint_state(tmp_path, "tiny-ocr"), str(tmp_path))
    assert err is not None  # no random document is a valid state of these weights


# -- end to end: exit 2, one line, no run folder ------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--set", "grpo.learning_rate=nan"], "--set grpo.learning_rate=nan: not a valid finite"),
        (["--set", "grpo.nope=1"], "--set grpo.nope: GRPOConfig has no field 'nope'"),
        (["--set", "num_val_prompts=0"], "num_val_prompts, num_val_seeds and val_every must be"),
        (["--set", "prompt_file=PROMPTS"], "prompt_file PROMPTS: not a JSON file"),
        (["--checkpoint", "CKPT"], "CKPT: tensor "),
        (["--spot-trace", "TRACE"], "TRACE: the trace never has a node"),
    ],
)
def test_the_cli_refuses_bad_input_in_one_line_and_writes_no_run_folder(
    tmp_path, capsys, monkeypatch, extra, message
):
    header = _header()
    name = next(k for k, v in header.items() if k != "__metadata__" and len(v["shape"]) == 2)
    header[name]["shape"] = header[name]["shape"][::-1]
    files = {"PROMPTS": ("p.json", b"{not json"), "CKPT": ("c.safetensors", _with_header(header))}
    files["TRACE"] = ("t.csv", b"")
    for token, (file, data) in files.items():
        (tmp_path / file).write_bytes(data)
        extra = [w.replace(token, str(tmp_path / file)) for w in extra]
        message = message.replace(token, str(tmp_path / file))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    out = tmp_path / "run"
    args = ["train", "--recipe", "tiny-ocr", "--no-wandb", "--out", str(out), *extra]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"spotlight: error: {message}") or message in err, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists()
