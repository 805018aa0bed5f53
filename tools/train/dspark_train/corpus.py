"""The training corpus: the Python standard library of the interpreter running the toolkit.

Debian 12 ships /usr/lib/python3.11 in parts: libpython3.11-stdlib (668 files) and
libpython3.11-testsuite (the `test` package and the modules' own test folders, 975 files), which
tools/train/install-deps.sh installs, so the corpus is reproducible without a download. Files are
assigned to train/val/test by a hash of their relative path, so the split does not depend on file
order or on which files happen to exist: adding a package adds files to every split and moves none.

    /usr/bin/python3 -m dspark_train corpus --write-manifest   # writes models/corpus-manifest.tsv

DSPARK_CORPUS_MANIFEST=FILE restricts the corpus to the paths a manifest lists:
models/corpus-manifest-v1.tsv is the stdlib without the testsuite package, on which the tokenizer
and the target's first phase were trained.
"""
import argparse
import hashlib
import os
import sysconfig
from pathlib import Path

from .paths import MANIFEST

SPLITS = ("train", "val", "test")


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def split_of(relpath: str) -> str:
    """96 % train, 2 % val, 2 % test, decided by sha256 of the relative path."""
    h = int.from_bytes(hashlib.sha256(relpath.encode("utf-8")).digest()[:8], "little") % 100
    if h < 96:
        return "train"
    return "val" if h < 98 else "test"


def restricting_manifest():
    """The manifest named by DSPARK_CORPUS_MANIFEST, or None (the whole stdlib)."""
    p = os.environ.get("DSPARK_CORPUS_MANIFEST")
    return Path(p) if p else None


def list_files(root: Path = None, manifest: Path = None):
    """Sorted relative paths of all *.py files under the stdlib, without third-party packages
    (only those `manifest` or else DSPARK_CORPUS_MANIFEST lists, when given)."""
    root = root or stdlib_root()
    only = manifest or restricting_manifest()
    only = {line.split("\t")[0] for line in only.read_text().splitlines()} if only else None
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in ("site-packages", "dist-packages", "__pycache__"))
        for f in filenames:
            rel = os.path.relpath(os.path.join(dirpath, f), root)
            if f.endswith(".py") and (only is None or rel in only):
                out.append(rel)
    return sorted(out)


def read_text(root: Path, relpath: str) -> str:
    # A few stdlib files are Latin-1 test fixtures; replacement keeps them as text and byte
    # fallback in the tokenizer covers whatever odd characters remain.
    return (root / relpath).read_bytes().decode("utf-8", errors="replace")


def build_manifest(root: Path = None):
    """[(relpath, sha256 of content, split)] for every corpus file."""
    root = root or stdlib_root()
    rows = []
    for rel in list_files(root):
        digest = hashlib.sha256((root / rel).read_bytes()).hexdigest()
        rows.append((rel, digest, split_of(rel)))
    return rows


def split_digest(split: str, root: Path = None) -> str:
    """sha256 over the (path, content sha256) rows of one split: token caches are keyed by it, so
    a changed corpus (another Python build, an added stdlib package) never reuses stale ids."""
    rows = "".join(f"{r}\t{d}\n" for r, d, s in build_manifest(root) if s == split)
    return hashlib.sha256(rows.encode()).hexdigest()


def write_manifest(path: Path = MANIFEST, root: Path = None) -> str:
    rows = build_manifest(root)
    text = "".join(f"{r}\t{d}\t{s}\n" for r, d, s in rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return hashlib.sha256(text.encode()).hexdigest()


def documents(split: str, root: Path = None, manifest: Path = None):
    """[(relpath, text)] of one split, in sorted path order (of `manifest`'s files, when given)."""
    assert split in SPLITS
    root = root or stdlib_root()
    return [(rel, read_text(root, rel)) for rel in list_files(root, manifest) if split_of(rel) == split]


def check_manifest(path: Path = None, root: Path = None):
    """Raise if this machine's stdlib differs from the committed manifest (or the restricting one)."""
    path = path or restricting_manifest() or MANIFEST
    want = path.read_text()
    rows = build_manifest(root)
    have = "".join(f"{r}\t{d}\t{s}\n" for r, d, s in rows)
    if want != have:
        w, h = set(want.splitlines()), set(have.splitlines())
        raise SystemExit(f"corpus differs from {path}: {len(w - h)} manifest rows missing here, "
                         f"{len(h - w)} extra rows here, e.g. {sorted(w ^ h)[:3]}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write-manifest", action="store_true")
    ap.add_argument("--check", action="store_true", help="compare this machine's stdlib to the manifest")
    a = ap.parse_args(argv)
    if a.write_manifest:
        print("manifest sha256", write_manifest())
    if a.check:
        check_manifest()
        print("corpus matches", MANIFEST)
    if not (a.write_manifest or a.check):
        for s in SPLITS:
            docs = documents(s)
            print(s, len(docs), "files", sum(len(t) for _, t in docs), "chars")


if __name__ == "__main__":
    main()
