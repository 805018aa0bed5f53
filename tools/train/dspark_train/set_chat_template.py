"""Add or replace tokenizer.chat_template in an existing GGUF, changing nothing else.

    /usr/bin/python3 -m dspark_train set-chat-template IN.gguf OUT.gguf [--template FILE]
    /usr/bin/python3 -m dspark_train set-chat-template models/ref-target.gguf models/ref-target.gguf  # in place

Without --template the model gets the toolkit's ChatML template (dspark_train/chatml.jinja, the one
the exporters write). --remove deletes the key instead.

The file is rewritten at the byte level, so any tensor type works (Q8_0 copies too): every other
key/value keeps its bytes and its place (a new key goes after the last tokenizer.* key), the tensor
infos are copied as they are (their offsets are relative to the data section), and the data section
is copied byte for byte after the header's alignment padding. OUT may equal IN: the new file is
written next to it and renamed over it.
"""
import argparse
import hashlib
import os
import struct
from pathlib import Path

from . import gguf_vocab

_STRING, _ARRAY = 8, 9
_SIZE = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_UINT32 = 4


class _Header:
    """The raw header of a GGUF v2/v3 file: key/value entries as (key, raw bytes of the whole entry),
    the tensor-info bytes, and where the data section starts."""

    def __init__(self, path):
        with open(path, "rb") as f:
            self.file_size = os.fstat(f.fileno()).st_size
            buf = bytearray()
            self._f, self._buf = f, buf
            self.pos = 0
            if self._take(4) != b"GGUF":
                raise ValueError(f"{path}: not a GGUF file")
            self.version, n_tensors, n_kv = struct.unpack("<IQQ", self._take(20))
            if self.version not in (2, 3):
                raise ValueError(f"{path}: GGUF version {self.version} (2 or 3 expected)")
            self.n_tensors = n_tensors
            self.kv = []
            self.alignment = 32
            for _ in range(n_kv):
                start = self.pos
                key = self._str()
                (vtype,) = struct.unpack("<I", self._take(4))
                value_start = self.pos
                self._skip_value(vtype)
                if key == "general.alignment":
                    (self.alignment,) = struct.unpack("<I", bytes(buf[value_start:value_start + 4]))
                self.kv.append((key, bytes(buf[start:self.pos])))
            start = self.pos
            for _ in range(n_tensors):
                self._str()
                (n_dims,) = struct.unpack("<I", self._take(4))
                self._take(8 * n_dims + 4 + 8)  # ne[], ggml type, offset
            self.tensor_infos = bytes(buf[start:self.pos])
            self.data_start = _align(self.pos, self.alignment)
            del self._f, self._buf

    def _take(self, n):
        while len(self._buf) < self.pos + n:
            chunk = self._f.read(1 << 20)
            if not chunk:
                raise ValueError("truncated GGUF header")
            self._buf += chunk
        b = bytes(self._buf[self.pos:self.pos + n])
        self.pos += n
        return b

    def _str(self):
        (n,) = struct.unpack("<Q", self._take(8))
        return self._take(n).decode("utf-8")

    def _skip_value(self, vtype):
        if vtype == _STRING:
            self._str()
        elif vtype == _ARRAY:
            elem, n = struct.unpack("<IQ", self._take(12))
            if elem in (_STRING, _ARRAY):
                for _ in range(n):
                    self._skip_value(elem)
            else:
                self._take(_SIZE[elem] * n)
        elif vtype in _SIZE:
            self._take(_SIZE[vtype])
        else:
            raise ValueError(f"unknown GGUF value type {vtype}")


def _align(n, a):
    return (n + a - 1) // a * a


def _string_entry(key: str, value: str) -> bytes:
    k, v = key.encode("utf-8"), value.encode("utf-8")
    return struct.pack("<Q", len(k)) + k + struct.pack("<IQ", _STRING, len(v)) + v


def rewrite_metadata(src, dst, set_strings=None, remove=()):
    """Copies GGUF `src` to `dst` with the string keys of `set_strings` added or replaced and the
    keys in `remove` deleted; everything else is kept byte for byte. Returns the data section's
    sha256 (identical in both files by construction)."""
    set_strings = dict(set_strings or {})
    h = _Header(src)
    entries = [(k, raw) for k, raw in h.kv if k not in remove]
    for key, value in set_strings.items():
        entry = _string_entry(key, value)
        at = next((i for i, (k, _) in enumerate(entries) if k == key), None)
        if at is not None:
            entries[at] = (key, entry)
            continue
        # after the last key of the same namespace (tokenizer.*), else at the end
        ns = key.split(".", 1)[0] + "."
        last = max((i for i, (k, _) in enumerate(entries) if k.startswith(ns)), default=len(entries) - 1)
        entries.insert(last + 1, (key, entry))
    header = b"".join([b"GGUF", struct.pack("<IQQ", h.version, h.n_tensors, len(entries))]
                      + [raw for _, raw in entries] + [h.tensor_infos])
    header += b"\0" * (_align(len(header), h.alignment) - len(header))
    dst = Path(dst)
    tmp = dst.with_name(dst.name + ".tmp")
    digest = hashlib.sha256()
    try:
        with open(src, "rb") as fin, open(tmp, "wb") as fout:
            fout.write(header)
            fin.seek(h.data_start)
            while chunk := fin.read(1 << 22):
                digest.update(chunk)
                fout.write(chunk)
        if os.path.getsize(tmp) - len(header) != h.file_size - h.data_start:
            raise OSError(f"{tmp}: short write")
        os.replace(tmp, dst)
    finally:
        if tmp.exists():
            tmp.unlink()
    return digest.hexdigest()


def data_sha256(path) -> str:
    """sha256 of a GGUF's tensor data section (everything after the header's padding)."""
    h = _Header(path)
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        f.seek(h.data_start)
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("src", help="GGUF to read")
    ap.add_argument("dst", help="GGUF to write (may be the same path)")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--template", help=f"Jinja template file (default: {gguf_vocab.CHATML_FILE.name})")
    g.add_argument("--remove", action="store_true", help="delete tokenizer.chat_template instead")
    a = ap.parse_args(argv)
    key = gguf_vocab.CHAT_TEMPLATE_KEY
    if a.remove:
        data = rewrite_metadata(a.src, a.dst, remove=(key,))
        print(f"{a.dst}: removed {key}; tensor data sha256 {data}")
        return 0
    text = gguf_vocab.read_template(a.template) if a.template else gguf_vocab.chatml_template()
    data = rewrite_metadata(a.src, a.dst, {key: text})
    print(f"{a.dst}: {key} set ({len(text.encode())} bytes); tensor data sha256 {data}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
