"""Data registry: every upstream file with its pinned URL and sha256.

Files are read from ``$FIELDEVAL_DATA_DIR`` when it is set (same relative
paths as the registry), otherwise downloaded once into the user cache
directory with pooch. Either way the sha256 is checked before use.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from fieldeval.errors import UsageError

DATA_DIR_ENV = "FIELDEVAL_DATA_DIR"
CACHE_DIR_ENV = "FIELDEVAL_CACHE_DIR"

_STAN8 = "https://raw.githubusercontent.com/Stan8/MicrobioRel/9a169a3fd7f979e75308eace26e374d0e96afc90/data"


@dataclass(frozen=True)
class DataFile:
    """One pinned upstream file.

    Attributes:
        path: path relative to the data directory, e.g. ``envo/envo.obo``.
        url: the pinned upstream URL it is downloaded from.
        sha256: the expected hex digest.
    """

    path: str
    url: str
    sha256: str


REGISTRY: dict[str, DataFile] = {
    f.path: f
    for f in (
        DataFile(
            "envo/envo.obo",
            "https://raw.githubusercontent.com/EnvironmentOntology/envo/"
            "b07261874c60051b6888f31397d1746e2817ecf0/envo.obo",
            "614821631d9ab47c827bb5657d894fdaa4e095deaa6a8cd22879b5090735e860",
        ),
        DataFile(
            "nmdc-ai-eval/ebs-suite.yaml",
            "https://raw.githubusercontent.com/microbiomedata/nmdc-ai-eval/"
            "116db9c5c4c34cdf074862c618912e774e0e109f/datasets/ebs-prediction/ebs-suite.yaml",
            "7451ba084504c4e98521e2b90a231931d52f8eaea80cda85b47f584f2dcb6459",
        ),
        DataFile(
            "microbiorel/unmasked/train_df.csv",
            f"{_STAN8}/unmasked_data/train_df.csv",
            "ec2dc105500f266f72c67c14d4c9a090d4f820c2e6d278eb008289a9ca06581b",
        ),
        DataFile(
            "microbiorel/unmasked/dev_df.csv",
            f"{_STAN8}/unmasked_data/dev_df.csv",
            "f2956fdf524702d4993f9674572dcb1c17634f734794b3c682cc4886fb6ef0e5",
        ),
        DataFile(
            "microbiorel/unmasked/test_df.csv",
            f"{_STAN8}/unmasked_data/test_df.csv",
            "4593c793df3b23e22fe2d37fb2c799e81e3e517e4b0a9658b20eb5f80422edcf",
        ),
        DataFile(
            "microbiorel/masked/train.csv",
            f"{_STAN8}/masked_data/train.csv",
            "9cb71b7f335125b96fc5bcdab35803f83216291f4d1233d437e2a71cd7d038b0",
        ),
        DataFile(
            "microbiorel/masked/validation.csv",
            f"{_STAN8}/masked_data/validation.csv",
            "7818418d750607e8ba24825b1385c8fb19c63da64589dbb868f636e0dddf9365",
        ),
        DataFile(
            "microbiorel/masked/test.csv",
            f"{_STAN8}/masked_data/test.csv",
            "811c8d1c89409753baf66a0ac9100efc8bb53d52d5b6a14244d7ab2a3da8f2b6",
        ),
    )
}


def cache_dir() -> Path:
    """The user cache directory for downloads and built indexes."""
    override = os.environ.get(CACHE_DIR_ENV)
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_cache_dir("fieldeval"))


def sha256_of(path: Path) -> str:
    """Hex sha256 of a file, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


_verified: dict[tuple[Path, float, int], str] = {}


def _verify(path: Path, entry: DataFile) -> Path:
    stat = path.stat()
    key = (path, stat.st_mtime, stat.st_size)
    if key not in _verified:
        _verified[key] = sha256_of(path)
    if _verified[key] != entry.sha256:
        raise UsageError(
            f"data file {path} has sha256 {_verified[key][:12]}..., expected {entry.sha256[:12]}...; "
            f"replace it with a fresh copy of {entry.url}"
        )
    return path


def fetch(relpath: str) -> Path:
    """Return a verified local path for a registered upstream file.

    Args:
        relpath: the registry path, e.g. ``"envo/envo.obo"``.

    Returns:
        The path of a local copy whose sha256 matches the registry.

    Raises:
        UsageError: the file is unknown, missing, corrupt, or cannot be downloaded.

    Example:
        >>> fetch("envo/envo.obo")  # doctest: +SKIP
        PosixPath('/home/me/.cache/fieldeval/envo/envo.obo')
    """
    entry = REGISTRY.get(relpath)
    if entry is None:
        raise UsageError(f"unknown data file {relpath!r}; known files: {', '.join(sorted(REGISTRY))}")
    data_dir = os.environ.get(DATA_DIR_ENV)
    if data_dir:
        path = Path(data_dir) / relpath
        if not path.is_file():
            raise UsageError(
                f"{relpath} not found in {DATA_DIR_ENV}={data_dir}; download {entry.url} to {path} "
                f"or unset {DATA_DIR_ENV} to download it automatically"
            )
        return _verify(path, entry)
    target = cache_dir() / "data" / relpath
    if target.is_file():
        return _verify(target, entry)
    import pooch

    try:
        pooch.retrieve(
            entry.url,
            known_hash=f"sha256:{entry.sha256}",
            fname=target.name,
            path=target.parent,
            progressbar=False,
        )
    except ValueError as error:  # pooch's hash mismatch
        raise UsageError(f"download of {entry.url} failed its sha256 check ({error}); try again later") from None
    except Exception as error:  # network errors come in many types
        raise UsageError(
            f"cannot download {relpath} from {entry.url} ({type(error).__name__}); "
            f"set {DATA_DIR_ENV} to a folder holding {relpath}"
        ) from None
    return target
