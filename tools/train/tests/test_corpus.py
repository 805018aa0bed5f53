"""The corpus listing, its hash split, manifests and the manifest restriction (phase-1 corpus).

    cd tools/train && /usr/bin/python3 -m pytest tests    # (make test runs them: ctest -L python)
"""
import os
import tempfile
import unittest
from pathlib import Path
from unittest import mock

from dspark_train import corpus


class TestCorpus(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.root = Path(self.dir.name) / "lib"
        # 40 modules and tests, a package that must be skipped, and a non-Python file.
        for i in range(20):
            for rel in (f"mod{i}.py", f"test/test_mod{i}.py"):
                (self.root / rel).parent.mkdir(parents=True, exist_ok=True)
                (self.root / rel).write_text(f"# {rel}\nx = {i}\n")
        (self.root / "site-packages/pkg").mkdir(parents=True)
        (self.root / "site-packages/pkg/__init__.py").write_text("third party\n")
        (self.root / "README.txt").write_text("not python\n")

    def tearDown(self):
        self.dir.cleanup()

    def test_listing_skips_third_party_packages_and_other_files(self):
        files = corpus.list_files(self.root)
        self.assertEqual(len(files), 40)
        self.assertFalse(any(f.startswith("site-packages") for f in files))
        self.assertEqual(files, sorted(files))

    def test_adding_files_moves_no_file_to_another_split(self):
        before = {r: s for r, _, s in corpus.build_manifest(self.root)}
        (self.root / "extra").mkdir()
        for i in range(30):
            (self.root / f"extra/e{i}.py").write_text("y = 1\n")
        after = {r: s for r, _, s in corpus.build_manifest(self.root)}
        self.assertEqual({r: after[r] for r in before}, before)

    def test_a_manifest_restricts_the_corpus_and_changes_the_split_digest(self):
        manifest = Path(self.dir.name) / "v1.tsv"
        rows = [r for r in corpus.build_manifest(self.root) if not r[0].startswith("test/")]
        manifest.write_text("".join(f"{r}\t{d}\t{s}\n" for r, d, s in rows))
        only = corpus.list_files(self.root, manifest)
        self.assertEqual(only, sorted(r for r, _, _ in rows))
        with mock.patch.dict(os.environ, {"DSPARK_CORPUS_MANIFEST": str(manifest)}):
            self.assertEqual(corpus.list_files(self.root), only)
            corpus.check_manifest(root=self.root)  # the restricted corpus matches its manifest
            restricted = [corpus.split_digest(s, self.root) for s in corpus.SPLITS]
        whole = [corpus.split_digest(s, self.root) for s in corpus.SPLITS]
        self.assertNotEqual(restricted[0], whole[0])  # train: token caches must be rebuilt
        docs = corpus.documents("train", self.root, manifest)
        self.assertTrue(docs and all(not r.startswith("test/") for r, _ in docs))

    def test_check_names_the_differing_rows(self):
        manifest = Path(self.dir.name) / "m.tsv"
        corpus.write_manifest(manifest, self.root)
        corpus.check_manifest(manifest, self.root)
        (self.root / "mod3.py").write_text("changed\n")
        with self.assertRaises(SystemExit) as e:
            corpus.check_manifest(manifest, self.root)
        self.assertIn("mod3.py", str(e.exception))


if __name__ == "__main__":
    unittest.main()
