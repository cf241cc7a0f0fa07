"""Where data files come from: the registry of known files and the resolver that finds them.

:func:`resolve` looks for a data file in ``$MEMLIB_DATA_DIR`` (and its sub-folders one level
deep), then in ``data/raw/``, then downloads it to ``data/raw/`` when :data:`REGISTRY` pins a
checksum for it; :func:`resolve_dataset` does so for a dataset name of :data:`DATASETS`, trying
each file that can hold it, plain or gzip-compressed. :func:`sha256_file` hashes a file, reading
it in full, or with ``cached=True`` once per process while the file is unchanged.
"""

from __future__ import annotations

import hashlib
import os
import urllib.request
import warnings
from pathlib import Path

from memlib._safewrite import write_file
from memlib.datasets.normalised import DatasetError

ROOT = Path(__file__).resolve().parents[2]  # the repository: memlib/datasets/resolver.py -> ../..
RAW_DIR = ROOT / "data" / "raw"


#: Where each known file comes from. A file without a pinned sha256 is never downloaded
#: automatically (its checksum could not be verified when the registry was written).
REGISTRY = {
    "locomo10.json": {
        "url": "https://raw.githubusercontent.com/snap-research/LoCoMo/"
        "3eb6f2c585f5e1699204e3c3bdf7adc5c28cb376/data/locomo10.json",
        "sha256": "79fa87e90f04081343b8c8debecb80a9a6842b76a7aa537dc9fdf651ea698ff4",
        "license": "CC BY-NC 4.0",
    },
    "longmemeval_s.json": {
        "url": "https://huggingface.co/datasets/xiaowu0162/longmemeval/resolve/main/longmemeval_s",
        "sha256": None,
        "license": "MIT",
    },
    "longmemeval_m.json": {
        "url": "https://huggingface.co/datasets/xiaowu0162/longmemeval/resolve/main/longmemeval_m",
        "sha256": None,
        "license": "MIT",
    },
    "longmemeval_oracle.json": {
        "url": "https://huggingface.co/datasets/xiaowu0162/longmemeval/resolve/main/longmemeval_oracle",
        "sha256": None,
        "license": "MIT",
    },
}

#: RealMem (``realmem``): ten persona files, from the release at commit 067c486 (Apache-2.0).
_REALMEM_SHA256 = {
    "Adeleke_Okonjo": "9dc2a8bf2777c182108b3859be6987b4203b65bd6df5cbb6e1a02e4e9f871fdb",
    "Ethan_Hunt": "67bd20d962cd0b01c1531cc82a73a0b1a1e58ef17db6e2f743fc9b35273734ac",
    "Kenta_Tanaka": "b8fe2e606db96dbce1ffa0ab7c21b23ce83d4b5d472d80cd4bd23cd8a259d397",
    "Kim_Ji_young": "e3e286120bc5e42d3dbe513d720f969ecebf3518fbe1a4782595e927474356a9",
    "Liam_O_Connor": "2427ab7d7012b28c0da9b2a70b1763cb60630f5198cf6eeed1ee68d0271c551c",
    "Lin_Wanyu": "a7a751066c48e829b3012a94f2b365febd0e6fb6db454a6d5f4ec01f9c55008a",
    "Oliver_Smith": "25a829eb690d7f81bd47141a0cd7c174e1aa98d899111d8b04e9115f0b92e1f3",
    "Pak_Budi": "d35e08ac141e83780b8b7bc3611feef042dbd082d0986812da1d885d028b638a",
    "Sarah_Miller": "2e84cfb4e29bfceebfb4eed09b84e7a2a7cae8a908d8584830e4c94a29819a6d",
    "Sophie_Dubois": "75f71e5ec0d14606debaea409075a6e631faf6a57d74ce7ec49f17476ef44e26",
}
#: The ten persona files of RealMem, in name order.
REALMEM_FILES = tuple(f"{p}_dialogues_256k.json" for p in _REALMEM_SHA256)
REGISTRY.update(
    {
        f"{p}_dialogues_256k.json": {
            "url": f"https://raw.githubusercontent.com/zhiyuan5986/RealMemBench/067c486/dataset/{p}_dialogues_256k.json",
            "sha256": digest,
            "license": "Apache-2.0",
        }
        for p, digest in _REALMEM_SHA256.items()
    }
)

#: Dataset names accepted by :func:`load`, each with the files that can hold it, most preferred
#: first: a user's full release wins over the cleaned 498-question LongMemEval-S that the shared
#: datasets folder holds (see ``data/README.md``). Any file may also be gzip-compressed (``.gz``).
DATASETS = {
    "locomo": ("locomo10.json",),
    "longmemeval_s": ("longmemeval_s_cleaned.json", "longmemeval_s.json", "longmemeval_s_cleaned_498.json"),
    "longmemeval_m": ("longmemeval_m_cleaned.json", "longmemeval_m.json"),
    "longmemeval_oracle": ("longmemeval_oracle.json",),
    "realmem": REALMEM_FILES,  # all ten, not one of them (:func:`resolve_realmem`)
}


def resolve_dataset(name: str) -> Path:
    """Return the path of the file behind a dataset name: the first of its :data:`DATASETS` files found.

    Each candidate is looked for as it is and gzip-compressed, in every place
    :func:`resolve` searches; only when none exists locally does the first
    candidate go to :func:`resolve` (which downloads it if its checksum is pinned,
    or says where to put it).
    """
    files = DATASETS[name]
    for filename in files:
        for candidate in (filename, filename + ".gz"):
            for path in _candidates(candidate):
                if path.is_file():
                    return resolve(candidate)
    # none is here: the first file the registry knows says where to get it (with its URL)
    known = [f for f in files if f in REGISTRY] or [files[0]]
    try:
        return resolve(known[0])
    except DatasetError as exc:
        if len(files) == 1:
            raise
        raise DatasetError(f"{exc} (memlib reads any of {', '.join(files)}, or the same name + .gz)") from None


def sha256_file(path, cached: bool = False) -> str:
    """Return the sha256 of a file (hex), read in full every time unless ``cached``.

    Parameters
    ----------
    path : str or Path
    cached : bool
        Remember the hash per process, by resolved path, size and modification
        time, and read the file again only when one of them changes. The
        parsed-dataset cache and the study result cache key on it this way (0.15 s
        for the 76 MB LongMemEval-S file); downloads are checked with a full read.

    Returns
    -------
    str
        64 hex digits.
    """
    if cached:
        return _remembered_sha256(path)
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


#: Content hashes of data files, by (resolved path, size, modification time): see :func:`sha256_file`.
_DIGESTS: dict = {}


def _remembered_sha256(path) -> str:
    # on a miss, the module's sha256_file reads the file (a test that replaces it counts the reads)
    path = Path(path)
    stat = path.stat()
    version = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if version not in _DIGESTS:
        _DIGESTS[version] = sha256_file(path)
    return _DIGESTS[version]


def _candidates(filename: str) -> list[Path]:
    out = []
    env = os.environ.get("MEMLIB_DATA_DIR")
    if env:
        base = Path(env)
        out.append(base / filename)
        if base.is_dir():
            out.extend(sorted(p / filename for p in base.iterdir() if p.is_dir()))
    out.append(RAW_DIR / filename)
    return out


def resolve(filename: str, download: bool = True) -> Path:
    """Return the path of a data file: ``$MEMLIB_DATA_DIR``, then ``data/raw/``, then a checksummed download.

    A local file whose content differs from the pinned checksum is used with a
    warning (it may be a deliberate edit); a downloaded file must match.
    """
    entry = REGISTRY.get(filename, {})
    for path in _candidates(filename):
        if path.is_file():
            if entry.get("sha256") and _remembered_sha256(path) != entry["sha256"]:
                warnings.warn(f"{path}: sha256 differs from the pinned release of {filename}", stacklevel=2)
            return path
    where = ", ".join(dict.fromkeys(str(p.parent) for p in _candidates(filename)))
    if not entry:
        raise DatasetError(f"data file {filename!r} not found; put it in {RAW_DIR} or set MEMLIB_DATA_DIR")
    if not entry.get("sha256"):
        raise DatasetError(
            f"{filename} not found in {where}, and no checksum is pinned for an automatic "
            f"download; download it from {entry['url']} (licence {entry['license']}) and save it as "
            f"{RAW_DIR / filename}, or set MEMLIB_DATA_DIR to its folder"
        )
    if not download:
        raise DatasetError(f"{filename} not found; put it in {RAW_DIR} or set MEMLIB_DATA_DIR to its folder")
    return _download(filename, entry)


def _download(filename: str, entry: dict) -> Path:
    """Download ``filename`` into :data:`RAW_DIR` by memlib's safe writer; a file whose sha256 differs is not kept."""
    target = RAW_DIR / filename

    def fetch(f):
        h = hashlib.sha256()
        try:
            with urllib.request.urlopen(entry["url"]) as response:
                for block in iter(lambda: response.read(1 << 20), b""):
                    h.update(block)
                    f.write(block)
        except OSError as exc:
            raise DatasetError(
                f"could not download {filename} from {entry['url']} ({exc}); offline, save the file as "
                f"{target} or set MEMLIB_DATA_DIR to its folder"
            ) from None
        if h.hexdigest() != entry["sha256"]:
            raise DatasetError(f"downloaded {filename} has sha256 {h.hexdigest()}, expected {entry['sha256']}")

    write_file(target, fetch, mode=0o644)
    return target
