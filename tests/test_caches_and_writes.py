"""Caches and writes you can trust (issue 32): no code from a cache file, no stale result, no write over
what is not ours.

Each test names one row of the README's reliability table; each fails on the code before issue 32.
"""

import ast
import errno
import gc
import gzip
import json
import os
import stat
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fixtures import jsonl_records, one_error_line, write_jsonl
from fixtures import run_memlib as run
from memlib import ParameterError
from memlib import datasets as D
from memlib._cachefiles import CacheWarning
from memlib.forgetting import consolidation_drops
from memlib.store import MemoryStore
from memlib.studies import STUDIES, DataSpec, Study, _cache, _codec
from test_realmem import REAL, persona
from test_result_cache import Result, counted  # noqa: F401 - counted is a fixture

MEMLIB = Path(__file__).resolve().parent.parent / "memlib"
#: A spec that names no dataset: a study reads corpora of its own.
EACH = DataSpec()


def entry_of(tmp_path, study="toy") -> Path:
    (path,) = (tmp_path / "cache" / "results" / study).glob("*.npz")
    return path


def rewrite_entry(path: Path, change, checksum: bool) -> None:
    """Rewrite a result cache entry: ``change(manifest, arrays)``, with a fresh checksum (a forger) or the old one."""
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    manifest = json.loads(arrays.pop("__manifest__").tobytes())
    change(manifest, arrays)
    text = json.dumps(manifest).encode()
    if checksum and hasattr(_cache, "checksum"):
        arrays["__checksum__"] = np.frombuffer(
            _cache.checksum(text, {k: v for k, v in arrays.items() if k != "__checksum__"}).encode(), np.uint8
        )
    np.savez_compressed(path, __manifest__=np.frombuffer(text, np.uint8), **arrays)


# -- 1. a cache file runs no code -------------------------------------------------------------------------------


def test_a_cache_entry_naming_an_outside_class_is_set_aside_and_builds_nothing(counted, tmp_path):  # noqa: F811
    study, calls, data = counted
    study.run(str(data))
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    planted = {"file": "x", "name": str(victim), "delete": True, "close_called": False}

    def plant(manifest, arrays):
        manifest["value"] = {"dataclass": "tempfile:_TemporaryFileCloser", "fields": planted}

    rewrite_entry(entry_of(tmp_path), plant, checksum=True)  # a forger rewrites the hash too
    with pytest.warns(CacheWarning, match="'tempfile:_TemporaryFileCloser', which is not one of memlib's result"):
        result = study.run(str(data))
    gc.collect()
    assert victim.read_text() == "mine"  # nothing was built from the file, so nothing deleted it
    assert isinstance(result, Result) and len(calls) == 2  # recomputed
    assert list((tmp_path / "cache" / "results" / "toy").glob("*.corrupt"))  # set aside, said once
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        study.run(str(data))
    assert len(calls) == 2


def test_the_decoder_builds_only_registered_types_and_known_forms():
    manifest, arrays = _cache.encode(Result(pd.DataFrame({"x": [1.0]})))
    for bad in (
        {"dataclass": "os:system", "fields": {}},
        {"dataclass": "test_result_cache:Result", "fields": {"table": None}},  # fields not the class's
        {"scalar": 1, "dtype": "O"},
        {"float": "1e400"},
        {"module": "os", "call": "system"},
        {"ndarray": "not-an-array"},
    ):
        with pytest.raises(_cache.CorruptEntry):
            _cache.decode({"format": _cache.FORMAT, "value": bad}, arrays)
    column = {"frame": {"x": {"array": "a0", "dtype": "pyarrow:Table"}}, "order": ["x"], "index": {"range": [0, 1, 1]}}
    with pytest.raises(_cache.CorruptEntry, match="table column"):
        _cache.decode({"format": _cache.FORMAT, "value": column}, arrays)


#: Every getattr/setattr of memlib whose attribute name is not written in the code, each read for where its name
#: comes from: none comes from a file.
REVIEWED_DYNAMIC_ATTRIBUTES = {
    ("__init__.py", "getattr(importlib.import_module(_LAZY[name]), name)"),  # _LAZY: a constant of the module
    ("cli.py", "getattr(args, name)"),  # argparse options, named by the module's constants
    ("datasets/__init__.py", "setattr(module, name, value)"),  # a name set on the package by code
    ("studies/__init__.py", "getattr(self.run(**params), self.table)"),  # Study.table, set in the registry
    ("studies/_codec.py", "getattr(a, f.name)"),  # the fields of a registered dataclass
    ("studies/_codec.py", "getattr(b, f.name)"),
    ("studies/_codec.py", "getattr(v, f.name)"),
    ("studies/data_spec.py", "getattr(self, f.name)"),  # DataSpec's own fields
    ("studies/data_spec.py", "getattr(self, name)"),
    ("studies/oracle_blind.py", "setattr(result, name, getattr(result, name).assign(factor_set=fs))"),
    ("studies/oracle_blind.py", "getattr(result, name)"),  # the result's table fields, a constant tuple
    ("studies/oracle_blind.py", "getattr(p, name)"),
    ("studies/transfer.py", "getattr(d, attr)"),  # CueData fields named in the code
    ("value.py", "getattr(x, reads, None)"),  # Value.reads, a class constant
}


def test_no_name_read_from_a_file_is_imported_or_looked_up():
    imports, dynamic = [], set()
    for path in sorted(MEMLIB.rglob("*.py")):
        where = str(path.relative_to(MEMLIB))
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if (
                name in ("import_module", "__import__", "eval", "exec")
                and not isinstance(f, ast.Attribute)
                or (name == "import_module" and ast.unparse(node) != "importlib.import_module(_LAZY[name])")
            ):
                imports.append((where, ast.unparse(node)))
            if name in ("getattr", "setattr") and not (len(node.args) > 1 and isinstance(node.args[1], ast.Constant)):
                dynamic.add((where, ast.unparse(node)))
    assert imports == []
    assert dynamic <= REVIEWED_DYNAMIC_ATTRIBUTES, sorted(dynamic - REVIEWED_DYNAMIC_ATTRIBUTES)
    for name in ("_cache.py", "_codec.py"):
        assert "import importlib\n" not in (MEMLIB / "studies" / name).read_text()


def test_every_study_result_type_is_one_the_cache_may_build():
    import typing

    for study in STUDIES.values():
        returned = typing.get_type_hints(study.run.uncached)["return"]
        assert _codec.type_name(returned) in _codec.RESULT_TYPES, study.name


# -- 3. a result is keyed by every file it read -------------------------------------------------------------------


def test_a_study_reading_several_corpora_runs_again_when_one_of_them_changes(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMLIB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("MEMLIB_RESULT_CACHE", raising=False)
    corpora = [write_jsonl(tmp_path / f"{name}.jsonl") for name in ("one", "two")]
    calls = []

    def study(data: DataSpec = EACH, seed: int = 0):
        calls.append(data)
        return Result(pd.DataFrame({"seed": [seed]}))

    multi = Study("toy-multi", study, "table", "00_toy.md", corpora=tuple(map(str, corpora)))
    multi.run(DataSpec(quick=True))
    multi.run(DataSpec(quick=True))
    assert len(calls) == 1
    records = jsonl_records()
    records[0]["sessions"][0]["turns"][0]["text"] += " (edited)"
    write_jsonl(corpora[1], records)  # one file of the second corpus changes
    multi.run(DataSpec(quick=True))
    assert len(calls) == 2


@pytest.mark.parametrize("name", ["transfer", "usage", "defaults"])
def test_the_multi_corpus_studies_key_on_every_file_of_every_corpus(tmp_path, monkeypatch, name):
    files = {
        n: [write_jsonl(tmp_path / f"{n}-{i}.jsonl") for i in range(2)] for n in ("locomo", "longmemeval_s", "realmem")
    }
    monkeypatch.setattr(D, "dataset_files", lambda dataset: files[dataset], raising=False)
    study = STUDIES[name]
    assert set(study.corpora) == set(files)

    def key():
        return _cache.key(name, study.run.uncached, (), {"data": DataSpec(quick=True)}, study.corpora)

    before = key()
    for corpus in files:
        files[corpus][1].write_text(files[corpus][1].read_text() + "\n")
        assert key() != before
        before = key()


def test_realmem_is_fingerprinted_by_all_ten_persona_files(monkeypatch):
    if not all((REAL / f).exists() for f in D.REALMEM_FILES):
        pytest.skip("the shared RealMem copy is not here")
    monkeypatch.setenv("MEMLIB_DATA_DIR", str(REAL.parent))
    assert len(_cache.data_fingerprint("realmem")["files"]) == 10


def test_editing_the_store_does_not_invalidate_the_synthetic_study():
    synthetic = {str(p.relative_to(MEMLIB)) for p in _cache.code_files("memlib.studies.synthetic")}
    stream = {str(p.relative_to(MEMLIB)) for p in _cache.code_files("memlib.studies.stream")}
    assert "store/memory.py" not in synthetic and "synthetic.py" in synthetic and "learning.py" in synthetic
    assert "store/memory.py" in stream and "defaults.json" in stream  # the store reads its defaults file
    assert _cache.code_version("memlib.studies.synthetic") != _cache.code_version("memlib.studies.stream")


# -- 4. an edited number is not served -----------------------------------------------------------------------------


def test_an_edited_number_in_a_cached_result_is_caught_and_recomputed(counted, tmp_path):  # noqa: F811
    study, calls, data = counted
    first = study.run(str(data), keep_fraction=0.3)

    def edit(manifest, arrays):
        name = manifest["value"]["fields"]["table"]["frame"]["keep"]["array"]
        arrays[name] = np.array([0.999])

    rewrite_entry(entry_of(tmp_path), edit, checksum=False)  # an edit that leaves the hash as it was
    with pytest.warns(CacheWarning, match="checksum does not match"):
        again = study.run(str(data), keep_fraction=0.3)
    assert again.table["keep"].tolist() == [0.3] and _cache.same(first, again) and len(calls) == 2


# -- 13. pruning deletes only the cache's own entries -------------------------------------------------------------


def test_pruning_keeps_files_the_cache_did_not_write_and_leaves_a_linked_folder_alone(tmp_path):
    folder = tmp_path / "study"
    for i in range(_cache.MAX_ENTRIES + 2):
        _cache.save(folder / f"{i:032x}.npz", Result(pd.DataFrame({"i": [i]})))
        os.utime(folder / f"{i:032x}.npz", ns=(10 + i, 10 + i))
    mine = folder / "mine.npz"
    np.savez(mine, x=np.arange(3))
    os.utime(mine, ns=(1, 1))  # older than every entry
    _cache.prune(folder)
    assert mine.exists() and len(list(folder.glob("*.npz"))) == _cache.MAX_ENTRIES + 1
    elsewhere = tmp_path / "users-own"
    elsewhere.mkdir()
    for i in range(_cache.MAX_ENTRIES + 3):
        np.savez(elsewhere / f"{i:032x}.npz", x=np.arange(i))
    link = tmp_path / "linked"
    link.symlink_to(elsewhere)
    _cache.prune(link)
    assert len(list(elsewhere.glob("*.npz"))) == _cache.MAX_ENTRIES + 3


# -- 2. and 7. one safe writer ------------------------------------------------------------------------------------


def small_store():
    st = MemoryStore(embedder=lambda texts: np.ones((len(texts), 384)))
    st.add("I am allergic to peanuts.", time=1.0)
    return st


def test_save_refuses_a_fifo_a_symlink_and_a_device_and_changes_none(tmp_path):
    from memlib._safewrite import check_target

    fifo, target, link = tmp_path / "pipe", tmp_path / "target.npz", tmp_path / "link.npz"
    os.mkfifo(fifo)
    target.write_text("not yours to replace")
    link.symlink_to(target)
    st = small_store()
    with pytest.raises(OSError, match=r"cannot save: is a FIFO \(named pipe\), not a regular file"):
        st.save(fifo)
    with pytest.raises(OSError, match="cannot save: is a symbolic link") as err:
        st.save(link)
    assert err.value.filename == str(link)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and link.is_symlink() and target.read_text() == "not yours to replace"
    with pytest.raises(OSError, match="is a character device, not a regular file"):
        check_target("/dev/null")  # (save calls it first; a test never writes over a real device)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.npz", "pipe", "target.npz"]


def test_the_writer_removes_its_temporary_file_on_an_error_and_keeps_the_old_file(tmp_path):
    from memlib._safewrite import write_file

    target = tmp_path / "out.json"
    target.write_text("old")

    def fails(f):
        f.write(b"half")
        raise RuntimeError("the study failed while writing")

    with pytest.raises(RuntimeError):
        write_file(target, fails)
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_a_long_name_is_refused_in_one_line_naming_the_limit(tmp_path):
    from memlib._safewrite import write_file

    with pytest.raises(OSError) as err:
        write_file(tmp_path / ("m" * 240 + ".npz"), b"x")
    assert err.value.errno == errno.ENAMETOOLONG
    assert "the file name is 244 bytes long; memlib writes names of at most 233 bytes" in str(err.value)
    with pytest.raises(OSError, match="cannot save: the file name is 244 bytes long"):
        small_store().save(tmp_path / ("m" * 240 + ".npz"))
    assert not list(tmp_path.iterdir())


@pytest.fixture
def fake_defaults(monkeypatch):
    """The defaults study replaced by a quick fake that records whether it ran."""
    from memlib.studies import defaults, defaults_file

    ran = []
    headline = pd.DataFrame({"corpus": ["x"], "held": [0.5]})
    measured = type("Measured", (), {"headline": headline, "info": {"datasets": list(defaults.DATASETS)}})()
    monkeypatch.setenv("MEMLIB_RESULT_CACHE", "0")  # the fake study runs, not a result cached by a real one
    monkeypatch.setattr(defaults, "load_corpus", lambda data, progress=False: ran.append(data.dataset))
    monkeypatch.setattr(defaults, "defaults_study_on", lambda hs, *args, **kwargs: measured)
    monkeypatch.setattr(defaults_file, "choose_defaults", lambda hs, measured, data: {"policy": {}, "value_model": "v"})
    return ran


@pytest.mark.parametrize("kind", ["folder", "symlink", "fifo"])
def test_defaults_write_refuses_its_target_before_the_study_runs_and_leaves_nothing(
    tmp_path, capsys, fake_defaults, kind
):
    from memlib import cli

    target = tmp_path / "defaults.json"
    if kind == "folder":
        target.mkdir()
    elif kind == "symlink":
        (tmp_path / "elsewhere.json").write_text("{}")
        target.symlink_to(tmp_path / "elsewhere.json")
    else:
        os.mkfifo(target)
    before = sorted(p.name for p in tmp_path.iterdir())
    assert cli.main(["defaults", "--quick", "--json", "--write", str(target)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"memlib: error: {target}: "), err
    assert fake_defaults == []  # refused before the study ran
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no temporary file left


def test_defaults_write_writes_a_regular_file_whole(tmp_path, capsys, fake_defaults):
    from memlib import cli

    target = tmp_path / "defaults.json"
    assert cli.main(["defaults", "--quick", "--json", "--write", str(target)]) == 0
    assert json.loads(target.read_text()) == {"policy": {}, "value_model": "v"}
    assert oct(target.stat().st_mode & 0o777) == "0o644" and sorted(p.name for p in tmp_path.iterdir()) == [target.name]


# -- 6. a persona is read once -------------------------------------------------------------------------------------


def test_a_realmem_folder_holding_a_persona_twice_is_refused(tmp_path):
    folder = tmp_path / "rm"
    folder.mkdir()
    (folder / "Ana_Lima_dialogues_256k.json").write_text(json.dumps(persona()))
    with gzip.open(folder / "Ana_Lima_dialogues_256k.json.gz", "wt") as f:
        f.write(json.dumps(persona()))
    with pytest.raises(D.DatasetError, match="holds Ana_Lima_dialogues_256k.json and Ana_Lima_dialogues_256k.json.gz"):
        D.load(str(folder))
    (folder / "Ana_Lima_dialogues_256k.json.gz").unlink()
    (folder / "Copy_dialogues_256k.json").write_text(json.dumps(persona()))  # another file, the same person_name
    with pytest.raises(D.DatasetError, match="persona 'Ana_Lima' is already read from .*Ana_Lima_dialogues_256k.json"):
        D.load(str(folder))


def test_a_realmem_folder_holding_a_folder_named_like_a_persona_file_is_one_error(tmp_path):
    folder = tmp_path / "rm"
    (folder / "Bo_dialogues_256k.json").mkdir(parents=True)
    (folder / "Ana_Lima_dialogues_256k.json").write_text(json.dumps(persona()))
    with pytest.raises(D.DatasetError, match="Bo_dialogues_256k.json: is not a file, so not a RealMem persona file"):
        D.load(str(folder))


# -- 8. a huge embedding keeps its direction ------------------------------------------------------------------------


def test_a_huge_finite_embedding_is_stored_by_its_direction_not_as_zero():
    direction = np.ones(384) / np.sqrt(384)
    st = MemoryStore(embedder=lambda texts: np.full((len(texts), 384), 1e308))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        st.add("huge from the embedder", time=1.0)
        st.add("huge given", time=2.0, embedding=np.full(384, 1e308))
        st.add("tiny given", time=3.0, embedding=np.full(384, 1e-320))
    assert np.allclose(st.embeddings, direction, atol=1e-6)


# -- 9. a long data file name -------------------------------------------------------------------------------------


def test_a_data_file_with_a_long_legal_name_is_cached_without_a_warning(tmp_path, monkeypatch, fake_model):
    from memlib import factors

    monkeypatch.setenv("MEMLIB_CACHE_DIR", str(tmp_path / "cache"))
    path = write_jsonl(tmp_path / ("c" * 239 + ".jsonl"))
    assert len(path.name) == 245
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = D.load(str(path))
        factors.annotate(ds, "blind")
    cached = list((tmp_path / "cache").rglob("*.npz"))
    assert {p.parent.name for p in cached} >= {"datasets", "factors"}
    assert all(len(p.name) <= 233 for p in cached)


# -- 11. and 12. one line, not a traceback --------------------------------------------------------------------------


@pytest.mark.slow
def test_sweep_and_studies_into_a_file_are_one_line(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    one_error_line(
        run("sweep", "synthetic", "-p", "seed", "0", "--out", str(afile)), f"{afile / '01_synthetic_confounds'}"
    )
    one_error_line(run("studies", "--out", str(afile)), f"{afile}: is a file, not a folder")
    assert afile.read_text() == "x"


def main_says(capsys, *argv) -> tuple[int, list]:
    """``python -m memlib *argv`` in this process: its exit status and its lines on stderr."""
    from memlib import cli

    code = cli.main(list(argv))
    return code, capsys.readouterr().err.strip().splitlines()


def test_notebooks_prepare_where_no_folder_can_be_made_or_named_is_one_line(tmp_path, capsys, monkeypatch):
    code, err = main_says(capsys, "notebooks", "prepare", "/proc/nb")
    assert code == 2 and err == ["memlib: error: /proc/nb: cannot make this folder (No such file or directory)"], err
    monkeypatch.chdir(tmp_path)
    code, err = main_says(capsys, "notebooks", "prepare", "")
    assert code == 2 and err == [
        "memlib: error: the notebook folder is empty: name a folder to write the notebooks into"
    ]
    assert list(tmp_path.iterdir()) == []  # (it wrote ten notebooks here)


def test_book_check_skips_a_folder_named_like_a_page(tmp_path, capsys):
    (tmp_path / "x.html").mkdir()
    (tmp_path / "index.html").write_text("<p>fine</p>")
    assert main_says(capsys, "book", "check", str(tmp_path)) == (0, [])


def test_add_with_a_time_beyond_any_float_is_one_error():
    st = small_store()
    with pytest.raises(ParameterError, match=r"time must be finite, got 1000000"):
        st.add("later", time=10**400)
    assert len(st.items()) == 1


@pytest.mark.slow
def test_a_reader_that_goes_away_gets_no_traceback():
    proc = subprocess.Popen(
        [sys.executable, "-m", "memlib", "study", "--list"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    proc.stdout.close()  # as `| head` does once it has read enough
    err = proc.stderr.read().decode()
    assert proc.wait() == 141 and err == "", err


# -- 14. NaN forget scores, an embedder that empties its input -----------------------------------------------------


def test_consolidation_refuses_a_nan_forget_score_naming_the_item():
    with pytest.raises(ParameterError, match="item 2 has a NaN forget score"):
        consolidation_drops([0.5, 0.2, float("nan"), 0.9], budget=2)
    nan = float("nan")  # a pinned item is no candidate: the error names the candidate's own position
    with pytest.raises(ParameterError, match=r"item 2 has a NaN forget score \(1 in all\)"):
        consolidation_drops([nan, 0.2, nan, 0.9], budget=1, pinned=[True, False, False, False])


def test_an_embedder_that_empties_its_input_list_changes_nothing():
    def emptying(texts):
        rows = np.eye(384)[[sum(map(ord, t)) % 384 for t in texts]]  # one direction per text: no merges
        texts.clear()
        return rows

    st = MemoryStore(embedder=emptying)
    st.add("one", time=1.0)
    st.add_many([{"text": "two", "time": 2.0}, {"text": "three", "time": 3.0}])
    assert [item["text"] for item in st.items()] == ["one", "two", "three"]
