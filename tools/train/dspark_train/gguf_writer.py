"""Minimal GGUF v3 writer (little endian, alignment 32), byte-compatible with ggml's gguf reader.

Layout: header (magic, version, tensor count, kv count) | key/values | tensor infos | padding |
tensor data, each tensor's offset (relative to the data section) a multiple of the alignment.
Dimensions are written innermost first (ggml `ne`), i.e. the reverse of a numpy shape, so a
PyTorch Linear weight [out, in] is written row-major as it is, with ne = [in, out].
"""
import hashlib
import struct

import numpy as np

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
ALIGNMENT = 32

# gguf_type
UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
_SCALAR_FMT = {UINT8: "<B", INT8: "<b", UINT16: "<H", INT16: "<h", UINT32: "<I", INT32: "<i",
               FLOAT32: "<f", BOOL: "<?", UINT64: "<Q", INT64: "<q", FLOAT64: "<d"}

# ggml_type of tensor data (I64: an eagle3 drafter's d2t, draft -> target token ids)
GGML_F32, GGML_F16, GGML_I64 = 0, 1, 27
_GGML_NP = {GGML_F32: np.float32, GGML_F16: np.float16, GGML_I64: np.int64}


def _str(s: str) -> bytes:
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _value(vtype: int, v) -> bytes:
    if vtype == STRING:
        return _str(v)
    return struct.pack(_SCALAR_FMT[vtype], v)


class GGUFWriter:
    def __init__(self):
        self.kv = []        # (key, type, value, elem_type)
        self.tensors = []   # (name, numpy shape, ggml_type, ndarray or a function returning one)

    # -- metadata; explicit types because llama.cpp checks them (e.g. uint32 vs int32) --
    def add(self, key: str, vtype: int, value):
        assert all(k != key for k, *_ in self.kv), f"duplicate key {key}"
        self.kv.append((key, vtype, value, None))

    def add_u32(self, key, v): self.add(key, UINT32, int(v))
    def add_u64(self, key, v): self.add(key, UINT64, int(v))
    def add_i32(self, key, v): self.add(key, INT32, int(v))
    def add_f32(self, key, v): self.add(key, FLOAT32, float(v))
    def add_bool(self, key, v): self.add(key, BOOL, bool(v))
    def add_str(self, key, v): self.add(key, STRING, str(v))

    def add_array(self, key: str, elem_type: int, values):
        assert all(k != key for k, *_ in self.kv), f"duplicate key {key}"
        self.kv.append((key, ARRAY, list(values), elem_type))

    # -- tensors --
    def add_tensor(self, name: str, arr: np.ndarray, ggml_type: int):
        arr = np.ascontiguousarray(arr, dtype=_GGML_NP[ggml_type])
        self._add(name, arr.shape, ggml_type, arr)

    def add_tensor_lazy(self, name: str, shape, ggml_type: int, produce):
        """A tensor whose data produce() returns (any float dtype, numpy `shape`) while write() runs,
        so a writer of a large model holds one tensor at a time, not the whole model."""
        self._add(name, tuple(int(n) for n in shape), ggml_type, produce)

    def _add(self, name, shape, ggml_type, source):
        assert len(name.encode()) < 64, "ggml tensor names are limited to 63 bytes"
        assert all(n != name for n, *_ in self.tensors), f"duplicate tensor {name}"
        self.tensors.append((name, tuple(shape), ggml_type, source))

    def _header(self) -> bytes:
        out = [GGUF_MAGIC, struct.pack("<IQQ", GGUF_VERSION, len(self.tensors), len(self.kv))]
        for key, vtype, value, elem in self.kv:
            out.append(_str(key) + struct.pack("<I", vtype))
            if vtype == ARRAY:
                out.append(struct.pack("<IQ", elem, len(value)))
                if elem == STRING:
                    out.extend(_str(s) for s in value)
                else:
                    out.append(np.asarray(value, dtype=np.dtype(_SCALAR_FMT[elem])).tobytes())
            else:
                out.append(_value(vtype, value))
        offset = 0
        for name, shape, gtype, _ in self.tensors:
            ne = list(reversed(shape))
            out.append(_str(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne)
                       + struct.pack("<IQ", gtype, offset))
            offset += _pad(_nbytes(shape, gtype))
        return b"".join(out)

    def write(self, path, progress=None):
        """Writes the file; progress(i, n, name) is called before each tensor's data. Returns the
        file's sha256 (hex), computed from the bytes as they are written."""
        digest = hashlib.sha256()
        header = self._header()
        with open(path, "wb") as f:
            def put(b):
                digest.update(b)
                f.write(b)
            put(header + b"\0" * (_pad(len(header)) - len(header)))
            for i, (name, shape, gtype, source) in enumerate(self.tensors):
                if progress is not None:
                    progress(i, len(self.tensors), name)
                arr = source() if callable(source) else source
                arr = np.ascontiguousarray(arr, dtype=_GGML_NP[gtype])
                if arr.shape != shape:
                    raise ValueError(f"tensor {name}: produced shape {arr.shape}, declared {shape}")
                # The array's own buffer, not a copy: an upcycled model's expert stacks are 100s of MB.
                put(memoryview(arr.reshape(-1)).cast("B"))
                put(b"\0" * (_pad(arr.nbytes) - arr.nbytes))
        if progress is not None:
            progress(len(self.tensors), len(self.tensors), "")
        return digest.hexdigest()


def _nbytes(shape, ggml_type) -> int:
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(_GGML_NP[ggml_type]).itemsize


def _pad(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT
